// UTF-8 validity of text from outside (files, request lines, flags): where the first invalid
// byte is, and the lossy conversion that makes any bytes valid UTF-8 (U+FFFD per maximal
// invalid subpart, as Rust's from_utf8_lossy and Hugging Face's decode do). Error messages and
// JSON output pass outside text through utf8_lossy, so they are always valid UTF-8.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hydragen {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Byte offset of the first invalid byte, or npos when s is valid UTF-8.
std::size_t utf8_invalid_at(std::string_view s);
// Invalid sequences become U+FFFD, one per maximal invalid subpart.
std::string utf8_lossy(std::string_view bytes);
// True when s ends inside a character (an incomplete but so far valid sequence).
bool utf8_ends_incomplete(std::string_view s);
// utf8_lossy(text) cut to at most max_bytes at a character boundary, "..." marking a cut: for
// quoting an outside value of any length in a message.
std::string utf8_excerpt(std::string_view text, std::size_t max_bytes = 80);

}  // namespace hydragen
