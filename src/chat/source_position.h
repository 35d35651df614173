// Turning a byte offset of the template into line:column for error messages.
#pragma once

#include <cstdint>
#include <string>

namespace hydragen::chat {

struct SourcePosition {
  int line;    // 1-based
  int column;  // 1-based, in characters
};

SourcePosition locate(const std::string& source, std::uint32_t offset);

// Throws TemplateError at `offset` of `source`.
[[noreturn]] void fail_at(const std::string& source, std::uint32_t offset, const std::string& message,
                          bool raised = false);

}  // namespace hydragen::chat
