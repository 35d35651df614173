// Parsing of the CLI's values: counts and lists ("1,4K,16K", "64:2K"), token ids, sizes
// ("20G"), real numbers; and the exit statuses. A malformed or out-of-range value is a
// UsageError naming the flag, so main prints it as "error: ..." and exits with kExitUsage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hydragen/error.h"

namespace hydragen::cli {

// The exit statuses of `hydragen`.
inline constexpr int kExitOk = 0;              // every request completed
inline constexpr int kExitError = 1;           // the run could not start or stopped (the error says why)
inline constexpr int kExitUsage = 2;           // the command line is wrong: a flag or its value
inline constexpr int kExitRequestsFailed = 3;  // it ran, and some requests failed (the summary lists them)

// A wrong command line: an unknown subcommand, a malformed or out-of-range flag value.
class UsageError : public Error {
 public:
  using Error::Error;
};

template <class... Parts>
[[noreturn]] void usage_error(const Parts&... parts) {
  throw UsageError(concat(parts...));
}

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

// Comma-separated token ids "1,2,3", each a decimal in [0, 2^31 - 1].
std::vector<std::int32_t> parse_token_ids(const std::string& text, const std::string& flag);

// A memory size: "20G", "512M", "1.5GiB", "320K", or bytes; at least 1 byte, at most 1 PiB.
std::int64_t parse_bytes(const std::string& text, const std::string& flag);

// A finite decimal number ("0.7", "1e-3") that fits a float.
float parse_float(const std::string& text, const std::string& flag);

// A decimal integer in [lo, hi] (no sign unless lo < 0).
std::int64_t parse_integer(const std::string& text, const std::string& flag, std::int64_t lo, std::int64_t hi);
// A decimal integer in [0, 2^64 - 1] (seeds).
std::uint64_t parse_unsigned(const std::string& text, const std::string& flag);

}  // namespace hydragen::cli
