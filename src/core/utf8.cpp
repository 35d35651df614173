#include "core/utf8.h"

#include <algorithm>

namespace hydragen {

namespace {

// How many bytes from s[i] form a valid prefix of a UTF-8 sequence (the "maximal subpart"),
// and whether that prefix is a whole character. Follows the Unicode well-formed byte table.
struct SequenceCheck {
  std::size_t valid_bytes;
  bool complete;
};

SequenceCheck check_sequence(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {1, true};
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, false};
  }
  std::size_t n = 1;
  for (; n < need && i + n < s.size(); ++n) {
    const auto b = static_cast<unsigned char>(s[i + n]);
    const bool ok = n == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return {n, false};
  }
  return {n, n == need};
}

}  // namespace

std::size_t utf8_invalid_at(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {  // ASCII runs, the common case
      ++i;
      continue;
    }
    const SequenceCheck c = check_sequence(s, i);
    if (!c.complete) return i;
    i += c.valid_bytes;
  }
  return std::string_view::npos;
}

std::string utf8_lossy(std::string_view bytes) {
  if (utf8_invalid_at(bytes) == std::string_view::npos) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    const SequenceCheck c = check_sequence(bytes, i);
    if (c.complete) {
      out.append(bytes.substr(i, c.valid_bytes));
      i += c.valid_bytes;
    } else {
      out.append(kReplacementChar);
      i += std::max<std::size_t>(c.valid_bytes, 1);
    }
  }
  return out;
}

bool utf8_ends_incomplete(std::string_view s) {
  // A character is at most 4 bytes: look for its start among the last 3.
  for (std::size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const std::size_t i = s.size() - back;
    const auto b = static_cast<unsigned char>(s[i]);
    if ((b & 0xC0) == 0x80) continue;  // a continuation byte: keep looking
    const SequenceCheck c = check_sequence(s, i);
    return !c.complete && c.valid_bytes == back;
  }
  return false;
}

std::string utf8_excerpt(std::string_view text, std::size_t max_bytes) {
  if (text.size() <= max_bytes) return utf8_lossy(text);
  const std::string valid = utf8_lossy(text.substr(0, max_bytes + 4));
  std::size_t cut = std::min(valid.size(), max_bytes);
  while (cut > 0 && (static_cast<unsigned char>(valid[cut]) & 0xC0) == 0x80) --cut;
  return valid.substr(0, cut) + "...";
}

}  // namespace hydragen
