// UTF-8 helpers for the tokenizer: walking code points, validation, the lossy conversion
// Hugging Face applies to decoded bytes, and the character classes added tokens look at.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hydragen::tok {

// Length in bytes of the UTF-8 character starting at s[i] (s is valid UTF-8).
std::size_t utf8_char_len(std::string_view s, std::size_t i);
// Decodes the character at s[i] of valid UTF-8 and advances i past it.
char32_t utf8_next(std::string_view s, std::size_t& i);
void utf8_append(std::string& out, char32_t cp);

// Byte offset of the first invalid byte, or npos when s is valid UTF-8.
std::size_t utf8_invalid_at(std::string_view s);
// Invalid sequences become U+FFFD, one per maximal invalid subpart (Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);
// True when s ends inside a character (an incomplete but so far valid sequence).
bool utf8_ends_incomplete(std::string_view s);

bool is_unicode_whitespace(char32_t cp);  // the White_Space property (regex \s)
bool is_word_char(char32_t cp);           // Unicode regex \w: letters, marks, digits, connectors

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace hydragen::tok
