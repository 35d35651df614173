// A step's penalty history: one row per sequence, built from its tokens, and its checks.
#include "sample/token_history.h"

#include <algorithm>
#include <limits>

#include "hydragen/error.h"
#include "sample/sampling.h"

namespace hydragen::sample {

std::span<const TokenCount> TokenHistory::row(std::size_t r) const {
  if (offsets.empty()) return {};
  const auto begin = static_cast<std::size_t>(offsets[r]), end = static_cast<std::size_t>(offsets[r + 1]);
  return std::span(entries).subspan(begin, end - begin);
}

// Keys 2 * token + (1 if generated) counted into held_.
void HeldTokens::count(std::vector<std::int64_t>& keys) {
  std::sort(keys.begin(), keys.end());
  if (keys.size() <= 8) {  // a step's new tokens: in place
    for (const std::int64_t key : keys) {
      const auto token = static_cast<std::int32_t>(key >> 1);
      auto at = std::lower_bound(held_.begin(), held_.end(), token,
                                 [](const TokenCount& e, std::int32_t t) { return e.token < t; });
      if (at == held_.end() || at->token != token) at = held_.insert(at, TokenCount{token, 0});
      at->generated += static_cast<std::int32_t>(key & 1);
    }
  } else {  // the prompt, or a count started over: merged in one pass
    std::vector<TokenCount> merged;
    merged.reserve(held_.size() + keys.size());
    auto old = held_.begin();
    for (std::size_t i = 0; i < keys.size();) {
      const auto token = static_cast<std::int32_t>(keys[i] >> 1);
      for (; old != held_.end() && old->token < token; ++old) merged.push_back(*old);
      TokenCount e{token, 0};
      if (old != held_.end() && old->token == token) e = *old++;
      for (; i < keys.size() && keys[i] >> 1 == token; ++i) e.generated += static_cast<std::int32_t>(keys[i] & 1);
      merged.push_back(e);
    }
    merged.insert(merged.end(), old, held_.end());
    held_ = std::move(merged);
  }
}

void HeldTokens::append_row(const SamplingParams& params, std::span<const std::int32_t> prompt,
                            std::span<const std::int32_t> generated, std::uint64_t step, TokenHistory& history) {
  HG_CHECK(!prompt.empty(), "HeldTokens: the prompt is empty");
  HG_CHECK(step <= generated.size() + 1, "HeldTokens: decode step ", step, " needs ", step - 1,
           " generated tokens, got ", generated.size());
  if (history.offsets.empty()) history.offsets.push_back(0);
  if (has_penalties(params)) {
    const std::size_t before_input = prompt.size() + step - 1;
    if (before_input < counted_) held_.clear(), counted_ = 0;
    // The tokens not counted yet, up to the step's input.
    std::vector<std::int64_t> keys;
    for (; counted_ < before_input; ++counted_) {
      if (counted_ < prompt.size()) {
        if (params.repetition_penalty != 1.f) keys.push_back(2 * std::int64_t{prompt[counted_]});
      } else {
        keys.push_back(2 * std::int64_t{generated[counted_ - prompt.size()]} + 1);
      }
    }
    count(keys);
    history.entries.insert(history.entries.end(), held_.begin(), held_.end());
  }
  HG_CHECK(history.entries.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()),
           "HeldTokens: ", history.entries.size(), " entries do not fit i32 offsets");
  history.offsets.push_back(static_cast<std::int32_t>(history.entries.size()));
}

void validate_history(const TokenHistory& history, std::int64_t rows, std::int64_t vocab) {
  const std::vector<std::int32_t>& offsets = history.offsets;
  if (offsets.empty()) {
    HG_CHECK(history.entries.empty(), "TokenHistory: ", history.entries.size(), " entries without offsets");
    return;
  }
  HG_CHECK(static_cast<std::int64_t>(offsets.size()) == rows + 1 && offsets[0] == 0 &&
               offsets.back() == static_cast<std::int64_t>(history.entries.size()),
           "TokenHistory: offsets must be rows + 1 = ", rows + 1, " entries from 0 to entries.size() = ",
           history.entries.size(), ", got ", offsets.size(), " from ", offsets.front(), " to ", offsets.back());
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto at = static_cast<std::size_t>(r);
    HG_CHECK(offsets[at] <= offsets[at + 1], "TokenHistory: offsets[", r + 1, "] = ", offsets[at + 1],
             " is below offsets[", r, "] = ", offsets[at]);
    std::int64_t last = -1;
    for (const TokenCount& e : history.row(at)) {
      HG_CHECK(e.token >= 0 && e.token < vocab, "TokenHistory: row ", r, " holds token ", e.token,
               ", outside the vocabulary [0, ", vocab, ")");
      HG_CHECK(e.token > last, "TokenHistory: row ", r, "'s tokens must be strictly increasing, got ", e.token,
               " after ", last);
      HG_CHECK(e.generated >= 0, "TokenHistory: row ", r, " token ", e.token, " has generated count ",
               e.generated, " (must be >= 0)");
      last = e.token;
    }
  }
}

}  // namespace hydragen::sample
