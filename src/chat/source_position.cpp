#include "chat/source_position.h"

#include <algorithm>

#include "chat/template.h"
#include "chat/unicode.h"

namespace hydragen::chat {

SourcePosition locate(const std::string& source, std::uint32_t offset) {
  const std::size_t end = std::min<std::size_t>(offset, source.size());
  int line = 1;
  std::size_t line_start = 0;
  for (std::size_t i = 0; i < end; ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  const auto column = code_point_count(std::string_view(source).substr(line_start, end - line_start));
  return {line, static_cast<int>(column) + 1};
}

void fail_at(const std::string& source, std::uint32_t offset, const std::string& message, bool raised) {
  const SourcePosition p = locate(source, offset);
  throw TemplateError(message, p.line, p.column, raised);
}

TemplateError::TemplateError(const std::string& message, int line, int column, bool raised)
    : Error(concat("chat template line ", line, ":", column, ": ", message)),
      message_(message),
      line_(line),
      column_(column),
      raised_(raised) {}

}  // namespace hydragen::chat
