// A decode step's penalty inputs (sampling.h): for each row, the distinct tokens its sequence
// holds before the step's input token, with how many of each it generated. The input token
// itself is left out because an overlapped step learns it on the device (the step before
// samples it); the sampler adds it (held_count). CSR over the step's rows: the engine appends
// a row per sequence (HeldTokens), a runner uploads the arrays with the step's inputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/counter_rng.h"

namespace hydragen::sample {

struct SamplingParams;

struct TokenCount {
  std::int32_t token;      // in the vocabulary
  std::int32_t generated;  // times the sequence generated it (>= 0; 0: a prompt token only)
};

struct TokenHistory {
  // Row r holds entries[offsets[r], offsets[r + 1]), tokens strictly increasing. `offsets` is
  // empty (no row holds any) or has rows + 1 entries from 0.
  std::vector<std::int32_t> offsets;
  std::vector<TokenCount> entries;

  std::span<const TokenCount> row(std::size_t r) const;  // empty when `offsets` is
};

// The tokens one sequence holds, counted as it grows: append_row appends the step's history
// row (the distinct tokens of `prompt` ++ `generated` before the input token of decode step
// `step`, i.e. the first prompt.size() + step - 1 of them, with their generated counts), and
// counts only what it had not counted at the last call, so a step costs O(distinct tokens),
// not O(prompt). The prompt's tokens are held only where repetition penalty is on (the others
// count generated tokens), and nothing where no penalty is. One object per sequence, whose
// params and tokens only grow (fewer tokens than counted start the count over).
class HeldTokens {
 public:
  void append_row(const SamplingParams& params, std::span<const std::int32_t> prompt,
                  std::span<const std::int32_t> generated, std::uint64_t step, TokenHistory& history);

 private:
  void count(std::vector<std::int64_t>& keys);
  std::vector<TokenCount> held_;  // by token
  std::size_t counted_ = 0;       // tokens of prompt ++ generated counted into held_
};

// Throws hydragen::Error naming what is wrong: offsets (empty or rows + 1 from 0,
// non-decreasing, ending at entries.size()), a row's tokens (strictly increasing, inside
// [0, vocab)), counts (>= 0).
void validate_history(const TokenHistory& history, std::int64_t rows, std::int64_t vocab);

// c_v of token v (sampling.h), or -1 when the row does not hold it: its generated count among
// the row's n entries (sorted by token: a binary search), the input token added (+ 1 when it
// was generated). Both twins call it; the device's entries are in global memory.
HG_HOST_DEVICE inline std::int32_t held_count(const TokenCount* entries, std::int32_t n, std::int32_t token,
                                              std::int32_t input_token, bool input_generated) {
  std::int32_t lo = 0, hi = n;
  while (lo < hi) {
    const std::int32_t mid = lo + (hi - lo) / 2;
    if (entries[mid].token < token) lo = mid + 1;
    else hi = mid;
  }
  std::int32_t count = lo < n && entries[lo].token == token ? entries[lo].generated : -1;
  if (token == input_token) count = (count < 0 ? 0 : count) + (input_generated ? 1 : 0);
  return count;
}

}  // namespace hydragen::sample
