// A compiled PCRE2 pattern in UTF mode with Unicode properties (UCP), as the pre-tokenizer
// regexes of Llama 3 / GPT-2 need (\p{L}, \p{N}, (?i:...), lookahead). Thread-safe to use.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hydragen::tok {

class Regex {
 public:
  // Throws hydragen::Error with PCRE2's message and the offset when the pattern is invalid.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches [begin, end) in byte offsets, left to right. text is valid UTF-8.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;
  bool matches_at_start(std::string_view text) const;  // anchored match at offset 0

 private:
  void* code_;  // pcre2_code_8*
  std::string pattern_;
};

}  // namespace hydragen::tok
