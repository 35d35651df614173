// The CPU backend's attention entry points. src/attention/ validates the inputs, builds the plan
// and dispatches here; nothing here re-checks shapes.
#pragma once

#include "attention/tree_plan.h"
#include "hydragen/attention.h"

namespace hydragen::cpu {

// q [T, Hq, d], k and v [S, Hkv, d], any float dtype; f32 state [T, Hq, d].
AttentionState attend(const Tensor& q, const Tensor& k, const Tensor& v, float scale, bool causal);

// f32 state [query_rows, Hq, d]; q any float dtype [query_rows, Hq, d].
AttentionState tree_attention(const SharingTree& tree, const TreePlan& plan, const Tensor& q, float scale,
                              bool causal, AttentionMode mode);

// float64 plain attention: o f64 [T, Hq, d], lse f64 [T, Hq]. Runs on the calling thread.
AttentionState reference_attend(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal);

// float64 full attention over each sequence's concatenated context, sequences in parallel.
AttentionState reference_tree_attention(const SharingTree& tree, const TreePlan& plan, const Tensor& q,
                                        double scale, bool causal);

}  // namespace hydragen::cpu
