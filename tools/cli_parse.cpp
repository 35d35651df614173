#include "cli_parse.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/utf8.h"

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

// The value quoted in a message: valid UTF-8, at most a line.
std::string quoted(const std::string& text) { return "'" + utf8_excerpt(text, 60) + "'"; }

// Digits only, as a non-negative integer at most `largest`; false when it is not one.
bool parse_decimal(const std::string& digits, std::int64_t largest, std::int64_t& value) {
  if (digits.empty() || digits.size() > 19) return false;
  value = 0;
  for (char c : digits) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    if (value > (largest - (c - '0')) / 10) return false;
    value = value * 10 + (c - '0');
  }
  return true;
}

}  // namespace

std::int64_t parse_count(const std::string& text, const std::string& flag) {
  if (text.empty()) usage_error(flag, ": expected a count such as 64 or 4K, got an empty value");
  std::int64_t multiplier = 1;
  std::string digits = text;
  const char last = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (last == 'K' || last == 'M') {
    multiplier = last == 'K' ? 1024 : 1024 * 1024;
    digits.pop_back();
  }
  std::int64_t value = 0;
  if (!parse_decimal(digits, std::numeric_limits<std::int64_t>::max() / multiplier, value))
    usage_error(flag, ": expected a count such as 64 or 4K (at most 2^63 - 1), got ", quoted(text));
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
    if (word.empty()) usage_error(flag, ": empty item in the list ", quoted(text));
  }
  return words;
}

TwoLevelShape parse_two_level(const std::string& text, const std::string& flag) {
  const std::vector<std::string> parts = split(text, ':');
  if (parts.size() != 2) usage_error(flag, ": expected GROUPS:LEVEL2 such as 64:2K, got ", quoted(text));
  TwoLevelShape shape{parse_count(parts[0], flag), parse_count(parts[1], flag)};
  if (shape.groups < 1) usage_error(flag, ": GROUPS must be at least 1, got ", quoted(text));
  return shape;
}

std::vector<std::int32_t> parse_token_ids(const std::string& text, const std::string& flag) {
  std::vector<std::int32_t> ids;
  const std::vector<std::string> items = split(text, ',');
  for (std::size_t i = 0; i < items.size(); ++i) {
    std::int64_t id = 0;
    if (!parse_decimal(items[i], std::numeric_limits<std::int32_t>::max(), id))
      usage_error(flag, ": item ", i + 1, " (", quoted(items[i]), ") is not a token id, a decimal in [0, ",
                  std::numeric_limits<std::int32_t>::max(), "]");
    ids.push_back(static_cast<std::int32_t>(id));
  }
  return ids;
}

std::int64_t parse_bytes(const std::string& text, const std::string& flag) {
  const char* const expected = ": expected a size like 20G, 512M or 1.5GiB";
  std::size_t number_end = 0;
  while (number_end < text.size() && (std::isdigit(static_cast<unsigned char>(text[number_end])) || text[number_end] == '.'))
    ++number_end;
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + number_end, value, std::chars_format::fixed);
  if (number_end == 0 || error != std::errc() || end != text.data() + number_end)
    usage_error(flag, expected, ", got ", quoted(text));
  const std::string unit = text.substr(number_end);
  const double scale = unit.empty() || unit == "B" ? 1.0
                       : unit == "K" || unit == "KiB" ? 1024.0
                       : unit == "M" || unit == "MiB" ? 1048576.0
                       : unit == "G" || unit == "GiB" ? 1073741824.0
                       : unit == "T" || unit == "TiB" ? 1099511627776.0
                                                      : -1.0;
  if (scale < 0) usage_error(flag, expected, " (units B, K, M, G, T), got ", quoted(text));
  const double bytes = value * scale;
  if (!(bytes >= 1)) usage_error(flag, ": ", quoted(text), " is less than one byte");
  if (!(bytes <= 1125899906842624.0)) usage_error(flag, ": ", quoted(text), " is more than 1 PiB");
  return static_cast<std::int64_t>(bytes);
}

float parse_float(const std::string& text, const std::string& flag) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || !std::isfinite(value))
    usage_error(flag, ": expected a finite number such as 0.7, got ", quoted(text));
  if (std::fabs(value) > std::numeric_limits<float>::max()) usage_error(flag, ": ", quoted(text), " is too large");
  return static_cast<float>(value);
}

std::int64_t parse_integer(const std::string& text, const std::string& flag, std::int64_t lo, std::int64_t hi) {
  const bool negative = !text.empty() && text[0] == '-' && lo < 0;
  std::int64_t magnitude = 0;
  const bool ok = parse_decimal(negative ? text.substr(1) : text, std::numeric_limits<std::int64_t>::max(), magnitude);
  const std::int64_t value = negative ? -magnitude : magnitude;
  if (!ok || value < lo || value > hi)
    usage_error(flag, ": expected an integer in [", lo, ", ", hi, "], got ", quoted(text));
  return value;
}

std::uint64_t parse_unsigned(const std::string& text, const std::string& flag) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) || error != std::errc() ||
      end != text.data() + text.size())
    usage_error(flag, ": expected an integer in [0, 2^64 - 1], got ", quoted(text));
  return value;
}

}  // namespace hydragen::cli
