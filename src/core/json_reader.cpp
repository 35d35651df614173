#include "core/json_reader.h"

#include <cstring>

#include "core/regular_file.h"
#include "core/utf8.h"
#include "hydragen/error.h"

namespace hydragen {

namespace {

// Byte offset of the first '[' or '{' (outside strings) that opens a level past max_depth, or
// npos. nlohmann's parser is iterative; this bounds the depth of the value it builds.
std::size_t too_deep_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

// nlohmann's message without its "[json.exception.parse_error.101] " tag.
std::string reason_of(const nlohmann::json::exception& e) {
  const char* text = e.what();
  const char* tag_end = std::strstr(text, "] ");
  return tag_end != nullptr && text[0] == '[' ? tag_end + 2 : text;
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& source, const JsonLimits& limits) {
  const std::string where = source.empty() ? "" : source + ": ";
  HG_CHECK(text.size() <= limits.max_bytes, where, bytes_text(text.size()), " of JSON is more than the limit of ",
           bytes_text(limits.max_bytes));
  const std::size_t bad = utf8_invalid_at(text);
  HG_CHECK(bad == std::string_view::npos, where, "invalid UTF-8 at byte ", bad, " (JSON text must be UTF-8)");
  const std::size_t deep = too_deep_at(text, limits.max_depth);
  HG_CHECK(deep == std::string_view::npos, where, "JSON nested deeper than ", limits.max_depth, " levels at byte ",
           deep);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(where, "not valid JSON at byte ", e.byte == 0 ? 0 : e.byte - 1, ": ", utf8_excerpt(reason_of(e), 200));
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number like 1e400
    fail(where, "not valid JSON: ", utf8_excerpt(reason_of(e), 200));
  }
}

nlohmann::json read_json_file(const std::filesystem::path& path, const JsonLimits& limits) {
  return parse_json(read_regular_file(path, limits.max_bytes), path.string(), limits);
}

std::string json_excerpt(const nlohmann::json& value, std::size_t max_bytes) {
  return utf8_excerpt(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), max_bytes);
}

}  // namespace hydragen
