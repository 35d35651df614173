#include "chat/string_ops.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "chat/unicode.h"
#include "chat/value.h"
#include "tokenizer/utf8.h"

namespace hydragen::chat {

namespace {

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

// Python's slice bounds for str methods: [start, end) clamped to [0, len].
std::pair<std::int64_t, std::int64_t> bounds(std::int64_t len, std::optional<std::int64_t> start,
                                             std::optional<std::int64_t> end) {
  auto fix = [len](std::int64_t i) {
    if (i < 0) i = std::max<std::int64_t>(0, i + len);
    return std::min(i, len);
  };
  return {start ? fix(*start) : 0, end ? fix(*end) : len};
}

// Byte offset of code point `index` in s (s.size() when index == count).
std::size_t byte_offset(std::string_view s, std::int64_t index) {
  std::size_t i = 0;
  for (std::int64_t k = 0; k < index && i < s.size(); ++k) i += tok::utf8_char_len(s, i);
  return i;
}

std::int64_t cp_index(std::string_view s, std::size_t byte) {
  return static_cast<std::int64_t>(code_point_count(s.substr(0, byte)));
}

}  // namespace

std::size_t byte_find(std::string_view haystack, std::string_view needle, std::size_t from) {
  if (from > haystack.size()) return std::string_view::npos;
  if (needle.empty()) return from;
  const void* p = memmem(haystack.data() + from, haystack.size() - from, needle.data(), needle.size());
  return p == nullptr ? std::string_view::npos : static_cast<std::size_t>(static_cast<const char*>(p) - haystack.data());
}

std::size_t byte_rfind(std::string_view haystack, std::string_view needle) {
  if (needle.size() > haystack.size()) return std::string_view::npos;
  if (needle.empty()) return haystack.size();
  const std::string h(haystack.rbegin(), haystack.rend());
  const std::string n(needle.rbegin(), needle.rend());
  const std::size_t r = byte_find(h, n);
  return r == std::string_view::npos ? r : haystack.size() - r - needle.size();
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::vector<char32_t> cps = code_points(s);
  std::vector<char32_t> set;
  if (chars) set = code_points(*chars);
  auto strip_it = [&](char32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : py_isspace(c);
  };
  std::size_t a = 0, b = cps.size();
  if (left) {
    while (a < b && strip_it(cps[a])) ++a;
  }
  if (right) {
    while (b > a && strip_it(cps[b - 1])) --b;
  }
  return to_utf8(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(a), cps.begin() + static_cast<std::ptrdiff_t>(b)));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit,
                                  bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = std::numeric_limits<std::int64_t>::max();
  if (sep) {
    if (sep->empty()) throw EvalError("empty separator");
    if (!from_right) {
      std::size_t start = 0;
      for (std::size_t at; static_cast<std::int64_t>(parts.size()) < maxsplit &&
                           (at = byte_find(s, *sep, start)) != std::string_view::npos;
           start = at + sep->size()) {
        parts.emplace_back(s.substr(start, at - start));
      }
      parts.emplace_back(s.substr(start));
      return parts;
    }
    std::size_t end = s.size();
    while (static_cast<std::int64_t>(parts.size()) < maxsplit) {
      const std::size_t at = byte_rfind(s.substr(0, end), *sep);
      if (at == std::string_view::npos) break;
      parts.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  std::vector<char32_t> cps = code_points(s);
  if (from_right) std::reverse(cps.begin(), cps.end());
  std::size_t i = 0;
  while (true) {
    while (i < cps.size() && py_isspace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (static_cast<std::int64_t>(parts.size()) == maxsplit) {  // the rest, as it is
      parts.push_back(to_utf8(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.end())));
      break;
    }
    std::size_t j = i;
    while (j < cps.size() && !py_isspace(cps[j])) ++j;
    parts.push_back(to_utf8(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j))));
    i = j;
  }
  if (from_right) {
    for (std::string& p : parts) {
      std::vector<char32_t> c = code_points(p);
      std::reverse(c.begin(), c.end());
      p = to_utf8(c);
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  const std::vector<char32_t> cps = code_points(s);
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) continue;
    std::size_t end = i + 1;
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') end = i + 2;
    const std::size_t stop = keepends ? end : i;
    lines.push_back(to_utf8(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(start), cps.begin() + static_cast<std::ptrdiff_t>(stop))));
    start = end;
    i = end - 1;
  }
  if (start < cps.size()) lines.push_back(to_utf8(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(start), cps.end())));
  return lines;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, std::int64_t count,
                       std::size_t max_bytes) {
  if (count < 0) count = std::numeric_limits<std::int64_t>::max();
  if (replacement.size() > old.size()) {
    const std::int64_t n = std::min(count, py_count(s, old, std::nullopt, std::nullopt));
    if (s.size() + static_cast<std::size_t>(n) * (replacement.size() - old.size()) > max_bytes) {
      throw EvalError("replace: the result would pass the output limit of " + std::to_string(max_bytes) + " bytes");
    }
  }
  std::string out;
  if (old.empty()) {
    std::int64_t done = 0;
    std::size_t i = 0;
    while (true) {
      if (done < count) {
        out += replacement;
        ++done;
      }
      if (i >= s.size()) break;
      const std::size_t n = tok::utf8_char_len(s, i);
      out.append(s.substr(i, n));
      i += n;
    }
    return out;
  }
  std::size_t start = 0;
  for (std::int64_t done = 0; done < count; ++done) {
    const std::size_t at = byte_find(s, old, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out += replacement;
    start = at + old.size();
  }
  out.append(s.substr(start));
  return out;
}

std::int64_t py_find(std::string_view s, std::string_view sub, std::optional<std::int64_t> start,
                     std::optional<std::int64_t> end, bool from_right) {
  const auto len = static_cast<std::int64_t>(code_point_count(s));
  if (start && *start > len) return -1;
  const auto [a, b] = bounds(len, start, end);
  if (a > b) return -1;
  const std::size_t ba = byte_offset(s, a);
  const std::size_t bb = byte_offset(s, b);
  const std::string_view window = s.substr(ba, bb - ba);
  const std::size_t at = from_right ? byte_rfind(window, sub) : byte_find(window, sub);
  if (at == std::string_view::npos) return -1;
  return a + cp_index(window, at);
}

std::int64_t py_count(std::string_view s, std::string_view sub, std::optional<std::int64_t> start,
                      std::optional<std::int64_t> end) {
  const auto len = static_cast<std::int64_t>(code_point_count(s));
  if (start && *start > len) return 0;
  const auto [a, b] = bounds(len, start, end);
  if (a > b) return 0;
  if (sub.empty()) return b - a + 1;
  const std::size_t ba = byte_offset(s, a);
  const std::string_view window = s.substr(ba, byte_offset(s, b) - ba);
  std::int64_t n = 0;
  for (std::size_t at = byte_find(window, sub); at != std::string_view::npos; at = byte_find(window, sub, at + sub.size())) ++n;
  return n;
}

bool py_affix(std::string_view s, std::string_view affix, std::optional<std::int64_t> start,
              std::optional<std::int64_t> end, bool at_end) {
  const auto len = static_cast<std::int64_t>(code_point_count(s));
  if (start && *start > len) return false;
  const auto [a, b] = bounds(len, start, end);
  if (a > b) return false;
  const std::size_t ba = byte_offset(s, a);
  const std::string_view window = s.substr(ba, byte_offset(s, b) - ba);
  if (affix.size() > window.size()) return false;
  return at_end ? window.substr(window.size() - affix.size()) == affix : window.substr(0, affix.size()) == affix;
}

std::string py_pad(std::string_view s, std::int64_t width, std::string_view fill, char align) {
  const auto len = static_cast<std::int64_t>(code_point_count(s));
  const std::int64_t marg = width - len;
  if (marg <= 0) return std::string(s);
  std::int64_t left = align == '<' ? 0 : align == '>' ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (std::int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (std::int64_t i = left; i < marg; ++i) out += fill;
  return out;
}

std::string py_zfill(std::string_view s, std::int64_t width) {
  const auto len = static_cast<std::int64_t>(code_point_count(s));
  if (width <= len) return std::string(s);
  const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
  std::string out = sign ? std::string(1, s[0]) : "";
  out.append(static_cast<std::size_t>(width - len), '0');
  out += sign ? s.substr(1) : s;
  return out;
}

}  // namespace hydragen::chat
