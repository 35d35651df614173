// The CPU backend's attention entry points. src/attention/ validates the inputs and dispatches
// here; nothing here re-checks shapes.
#pragma once

#include <cstdint>

#include "hydragen/attention.h"
#include "plan/paged_plan.h"

namespace hydragen::cpu {

// A sharing tree paged into f32 pools [pages, page_size, Hkv, d] as plan::page_tree lays it out
// (own_context_copies: the dense layout); slots no run fills hold NaN.
struct TreePool {
  plan::PagedLayout layout;
  Tensor k, v;
};
TreePool pool_tree(const SharingTree& tree, std::int64_t q_heads, int page_size, bool own_context_copies);

// The tree paged (pool_tree), planned with plan_options and run by run_attention_plan, as the
// engine's CPU steps run. q any float dtype [query_rows, Hq, d]; f32 state.
AttentionState tree_attention(const SharingTree& tree, const Tensor& q, const TreeAttentionOptions& options);

// float64 plain attention: o f64 [T, Hq, d], lse f64 [T, Hq]. Runs on the calling thread.
AttentionState reference_attend(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal);

// float64 full attention over each sequence's concatenated context, sequences in parallel.
AttentionState reference_tree_attention(const SharingTree& tree, const Tensor& q, double scale, bool causal);

}  // namespace hydragen::cpu
