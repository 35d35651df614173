// Text the way Python's str sees it: code points of UTF-8, case mapping (full mappings and the
// final-sigma rule), whitespace, printable characters (for repr) and the is*() classes.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace hydragen::chat {

// The code points of valid UTF-8 text.
std::vector<char32_t> code_points(std::string_view text);
std::string to_utf8(const std::vector<char32_t>& cps);
void append_utf8(std::string& out, char32_t cp);
std::size_t code_point_count(std::string_view text);

bool py_isspace(char32_t cp);
bool py_isprintable(char32_t cp);
bool py_isalpha(char32_t cp);
bool py_isdecimal(char32_t cp);
bool py_isdigit(char32_t cp);
bool py_isnumeric(char32_t cp);
bool py_iscased(char32_t cp);
// str.islower() / str.isupper(): some cased character, and none that lower() / upper() changes.
bool py_islower(std::string_view text);
bool py_isupper(std::string_view text);

// str.upper(), str.lower(), str.title(), str.capitalize(), str.swapcase() of valid UTF-8.
std::string py_upper(std::string_view text);
std::string py_lower(std::string_view text);
std::string py_title(std::string_view text);
std::string py_capitalize(std::string_view text);
std::string py_swapcase(std::string_view text);

}  // namespace hydragen::chat
