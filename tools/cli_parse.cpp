#include "cli_parse.h"

#include <cctype>
#include <limits>

#include "hydragen/error.h"

namespace hydragen::cli {

namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::string current;
  for (char c : text) {
    if (c == separator) {
      parts.push_back(current);
      current.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      current.push_back(c);
    }
  }
  parts.push_back(current);
  return parts;
}

}  // namespace

std::int64_t parse_count(const std::string& text, const std::string& flag) {
  HG_CHECK(!text.empty(), flag, ": expected a count such as 64 or 4K, got an empty value");
  std::int64_t multiplier = 1;
  std::string digits = text;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (last == 'K' || last == 'M') {
    multiplier = last == 'K' ? 1024 : 1024 * 1024;
    digits.pop_back();
  }
  HG_CHECK(!digits.empty() && digits.size() <= 12, flag, ": expected a count such as 64 or 4K, got '",
           text, "'");
  std::int64_t value = 0;
  for (char c : digits) {
    HG_CHECK(std::isdigit(static_cast<unsigned char>(c)), flag,
             ": expected a count such as 64 or 4K, got '", text, "'");
    value = value * 10 + (c - '0');
  }
  HG_CHECK(value <= std::numeric_limits<std::int64_t>::max() / multiplier, flag, ": '", text,
           "' is too large");
  return value * multiplier;
}

std::vector<std::int64_t> parse_count_list(const std::string& text, const std::string& flag) {
  std::vector<std::int64_t> values;
  for (const std::string& item : split(text, ',')) values.push_back(parse_count(item, flag));
  return values;
}

std::vector<std::string> parse_word_list(const std::string& text, const std::string& flag) {
  std::vector<std::string> words = split(text, ',');
  for (const std::string& word : words) {
    HG_CHECK(!word.empty(), flag, ": empty item in the list '", text, "'");
  }
  return words;
}

TwoLevelShape parse_two_level(const std::string& text, const std::string& flag) {
  const std::vector<std::string> parts = split(text, ':');
  HG_CHECK(parts.size() == 2, flag, ": expected GROUPS:LEVEL2 such as 64:2K, got '", text, "'");
  TwoLevelShape shape{parse_count(parts[0], flag), parse_count(parts[1], flag)};
  HG_CHECK(shape.groups >= 1, flag, ": GROUPS must be at least 1, got '", text, "'");
  return shape;
}

}  // namespace hydragen::cli
