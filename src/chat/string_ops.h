// Python's str operations on UTF-8 text, by code point: strip, split, splitlines, replace,
// find, center and friends (the str methods and the filters built on them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hydragen::chat {

// str.strip / lstrip / rstrip: whitespace when chars is nullopt, else any of its characters.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / rsplit: on whitespace runs when sep is nullopt (EvalError for an empty sep).
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit,
                                  bool from_right);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
// EvalError when the result would pass max_bytes.
std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, std::int64_t count,
                       std::size_t max_bytes);
// str.find / rfind / count over s[start:end] in code points (Python's slice bounds).
std::int64_t py_find(std::string_view s, std::string_view sub, std::optional<std::int64_t> start,
                     std::optional<std::int64_t> end, bool from_right);
std::int64_t py_count(std::string_view s, std::string_view sub, std::optional<std::int64_t> start,
                      std::optional<std::int64_t> end);
// str.startswith / endswith over s[start:end].
bool py_affix(std::string_view s, std::string_view affix, std::optional<std::int64_t> start,
              std::optional<std::int64_t> end, bool at_end);
// str.center / ljust / rjust with a one-character fill; str.zfill.
std::string py_pad(std::string_view s, std::int64_t width, std::string_view fill, char align);
std::string py_zfill(std::string_view s, std::int64_t width);

}  // namespace hydragen::chat

namespace hydragen::chat {

// The byte offset of the first `needle` in `haystack` at or after `from` (linear time), or npos.
std::size_t byte_find(std::string_view haystack, std::string_view needle, std::size_t from = 0);
// The byte offset of the last `needle` that ends at or before `end`, or npos.
std::size_t byte_rfind(std::string_view haystack, std::string_view needle);

}  // namespace hydragen::chat
