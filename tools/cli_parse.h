// Parsing of the CLI's list and pair arguments ("1,4K,16K", "64:2K"). Errors are
// hydragen::Error naming the flag, so main prints them as "error: ...".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hydragen::cli {

// "1024", "4K" (= 4096), "1M" (= 1048576). Throws naming `flag` on anything else.
std::int64_t parse_count(const std::string& text, const std::string& flag);

// Comma-separated counts: "16,64,256" or "1K,4K,16K". Empty items are an error.
std::vector<std::int64_t> parse_count_list(const std::string& text, const std::string& flag);

// Comma-separated words: "hydragen,paged,dense".
std::vector<std::string> parse_word_list(const std::string& text, const std::string& flag);

// "GROUPS:LEVEL2", e.g. "64:2K" -> {64, 2048}.
struct TwoLevelShape {
  std::int64_t groups = 0;
  std::int64_t level2_tokens = 0;
};
TwoLevelShape parse_two_level(const std::string& text, const std::string& flag);

}  // namespace hydragen::cli
