// Row-level merge of attention states, shared by merge_states and the CPU plan runner.
#pragma once

#include <cstdint>
#include <span>

#include "hydragen/attention.h"

namespace hydragen::cpu {

// The merge of n partial states of one (row, head):
//   m = max_i lse_i,  w_i = exp(lse_i - m),  o = Σ w_i·o_i / Σ w_i,  lse = m + log Σ w_i.
// Empty inputs (lse = -inf) get weight 0; all empty gives (0, -inf), never NaN. A NaN input
// makes the merge NaN: it never passes for empty.
// o_out may alias o_in[0] (the in-place two-way merge).
void merge_state_rows(std::span<const float* const> o_in, std::span<const float> lse_in,
                      std::int64_t head_dim, float* o_out, float* lse_out);

// A state whose every element is NaN: merge_states' output starts so, so an element the
// code forgets to write shows up as NaN in the tests instead of a stale value.
AttentionState poisoned_state(std::int64_t rows, std::int64_t heads, std::int64_t head_dim);

}  // namespace hydragen::cpu
