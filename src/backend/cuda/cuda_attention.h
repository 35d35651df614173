// Tree attention on a CUDA device: the sharing tree's K/V are copied into a page pool, the
// host builds the plan (src/plan/paged_plan.h), two kernels run it. Host-only header (no
// CUDA types): src/attention/tree_attention.cpp calls it when q lives on a CUDA device.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/paged_plan.h"
#include "hydragen/attention.h"

namespace hydragen::cuda {

// Number of CUDA devices (0 when none, or when the driver is missing).
int device_count();

// q: CUDA tensor [query_rows, Hq, d], bf16 or f16, packed as SharingTree describes. The
// tree's K/V may live anywhere in any dtype; they are converted to q's dtype. Head dims 64
// and 128 (others throw hydragen::Error). Modes hydragen, paged and dense (dense first makes
// a contiguous copy of each sequence's context). Returns o f32 [rows, Hq, d] and lse f32
// [rows, Hq] on the CPU; o is the kernel's q-dtype output widened to f32.
AttentionState tree_attention(const SharingTree& tree, const Tensor& q, const TreeAttentionOptions& options = {},
                              int page_size = 64);

// The tree laid out in pages on the host: the pool's K and V images ([pages, page_size,
// Hkv, d] of `dtype`, 16-bit elements) and the layout that indexes them. dense_copy gives
// every sequence its own contiguous copy of its context (the dense baseline).
struct PagedTreeImage {
  plan::PagedLayout layout;
  std::vector<std::uint16_t> k, v;
};
PagedTreeImage page_tree(const SharingTree& tree, std::int64_t q_heads, DType dtype, int page_size, bool dense_copy);

}  // namespace hydragen::cuda
