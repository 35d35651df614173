#include "plan/tree_pages.h"

#include "hydragen/error.h"

namespace hydragen::plan {

namespace {

// Pages [first, ...) that hold `tokens` tokens from slot first_slot of the first.
std::vector<std::int32_t> page_run(std::int64_t first_slot, std::int64_t tokens, int page_size) {
  std::vector<std::int32_t> pages;
  const std::int64_t first = first_slot / page_size;
  const std::int64_t end = (first_slot + tokens + page_size - 1) / page_size;
  for (std::int64_t p = first; p < end; ++p) pages.push_back(static_cast<std::int32_t>(p));
  return pages;
}

}  // namespace

TreePages page_tree(const SharingTree& tree, std::int64_t q_heads, int page_size, bool own_context_copies) {
  HG_CHECK(page_size >= 16 && (page_size & (page_size - 1)) == 0, "page_tree: page_size must be a power of two >= 16, got ",
           page_size);
  TreePages out;
  PagedLayout& layout = out.layout;
  layout.page_size = page_size;
  layout.kv_heads = static_cast<int>(tree.kv_heads());
  layout.q_heads = static_cast<int>(q_heads);
  layout.head_dim = static_cast<int>(tree.head_dim());
  std::int64_t slot = 0;  // the next free slot
  if (!own_context_copies) {
    for (const Segment& segment : tree.segments) {
      const std::int64_t tokens = segment.k.size(0);
      layout.segments.push_back({segment.parent, tokens, page_run(slot, tokens, page_size),
                                 static_cast<std::int32_t>(slot % page_size)});
      out.copies.push_back({&segment.k, &segment.v, slot});
      slot += tokens;
    }
  }
  for (int s = 0; s < static_cast<int>(tree.sequences.size()); ++s) {
    const Sequence& sequence = tree.sequences[s];
    slot = (slot + page_size - 1) / page_size * page_size;  // a fresh page
    const std::int64_t first = slot;
    if (own_context_copies)
      for (int segment : tree.path(s)) {
        const Segment& copied = tree.segments[segment];
        out.copies.push_back({&copied.k, &copied.v, slot});
        slot += copied.k.size(0);
      }
    out.copies.push_back({&sequence.k, &sequence.v, slot});
    slot += sequence.k.size(0);
    layout.sequences.push_back({own_context_copies ? kNoParent : sequence.parent, slot - first,
                                page_run(first, slot - first, page_size), static_cast<int>(sequence.query_tokens)});
  }
  out.pages = (slot + page_size - 1) / page_size;
  HG_CHECK(out.pages * page_size < INT32_MAX, "page_tree: the tree's ", slot, " tokens do not fit 32-bit slots");
  return out;
}

}  // namespace hydragen::plan
