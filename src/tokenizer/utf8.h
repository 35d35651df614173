// UTF-8 helpers for the tokenizer: walking code points and the character classes added tokens
// look at; validation and the lossy conversion Hugging Face applies to decoded bytes (core's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/utf8.h"

namespace hydragen::tok {

// Length in bytes of the UTF-8 character starting at s[i] (s is valid UTF-8).
std::size_t utf8_char_len(std::string_view s, std::size_t i);
// Decodes the character at s[i] of valid UTF-8 and advances i past it.
char32_t utf8_next(std::string_view s, std::size_t& i);
void utf8_append(std::string& out, char32_t cp);

// Validity and the lossy conversion live in core (outside text of every kind needs them).
using hydragen::utf8_ends_incomplete;
using hydragen::utf8_invalid_at;
using hydragen::utf8_lossy;
using hydragen::kReplacementChar;

bool is_unicode_whitespace(char32_t cp);  // the White_Space property (regex \s)
bool is_word_char(char32_t cp);           // Unicode regex \w: letters, marks, digits, connectors

}  // namespace hydragen::tok
