// Greedy decoding on the Llama forward pass: each step appends the argmax token. Enough
// for tests and the demo; sampling and scheduling belong to the engine.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "hydragen/attention.h"
#include "model/llama.h"

namespace hydragen {

// The index of the largest value of row `row` of logits [rows, vocab]; the first on ties.
std::int32_t argmax_row(const Tensor& logits, std::int64_t row);

// Called with each greedy token as soon as it is chosen (for streaming output).
using TokenCallback = std::function<void(std::int32_t token)>;

// `new_tokens` greedy tokens after `prompt`: one prefill step, then one token per step.
std::vector<std::int32_t> greedy(const Llama& model, std::span<const std::int32_t> prompt, std::int64_t new_tokens,
                                 AttentionMode mode = AttentionMode::hydragen, const TokenCallback& on_token = {});

// Greedy continuations of prefix + suffixes[b] for every b, decoded as one batch: the prefix
// is prefilled once into a shared cache that every sequence's attention reads as a tree
// segment, so hydragen, paged and dense modes all see a real sharing tree.
std::vector<std::vector<std::int32_t>> greedy_shared_prefix(const Llama& model, std::span<const std::int32_t> prefix,
                                                            const std::vector<std::vector<std::int32_t>>& suffixes,
                                                            std::int64_t new_tokens,
                                                            AttentionMode mode = AttentionMode::hydragen,
                                                            const std::function<void(std::size_t sequence,
                                                                                     std::int32_t token)>& on_token = {});

}  // namespace hydragen
