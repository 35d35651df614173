// A sharing tree laid out in a page pool the way the engine leaves K/V there, so that the
// public tree attention runs the engine's plan and kernels: the segments one after another
// from slot 0 (each starts where the one before it ends, often inside a page, as the radix
// tree's splits leave them), then each sequence's own tokens from the start of fresh pages.
// For the dense baseline there are no shared segments: each sequence's pages hold its own copy
// of its whole context, path segments then suffix.
#pragma once

#include <cstdint>
#include <vector>

#include "hydragen/attention.h"
#include "plan/paged_plan.h"

namespace hydragen::plan {

struct TreePages {
  PagedLayout layout;
  std::int64_t pages = 0;  // the pool pages the layout uses: ids [0, pages)
  // The writes that fill the pool: tokens [0, len) of k and v go to slots [slot, slot + len).
  struct Copy {
    const Tensor* k = nullptr;
    const Tensor* v = nullptr;
    std::int64_t slot = 0;
  };
  std::vector<Copy> copies;
};

// tree valid (SharingTree::validate), q_heads a multiple of its Hkv, page_size a power of two
// >= 16. own_context_copies: the dense layout. The copies point into `tree`.
TreePages page_tree(const SharingTree& tree, std::int64_t q_heads, int page_size, bool own_context_copies);

}  // namespace hydragen::plan
