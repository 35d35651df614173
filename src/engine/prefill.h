// Prefill: what a sequence computes before it decodes, in chunks under a step's token budget.
// First the unfilled nodes of its tree path, root first (a node starts once its parent is
// filled, possibly by the same step: every row's K/V is written before attention reads it);
// then its unshared prompt copied into its own pages (dense, one-level sharing); then its own
// slots (after a preemption: the prompt's last token and the tokens it had generated). Progress
// is booked when a chunk is scheduled: the step that computes it runs before any later one.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "engine/sequence.h"
#include "kv/radix_tree.h"

namespace hydragen::engine {

// Tokens [begin, begin + tokens) of a tree node, or of a sequence's own slots.
struct PrefillChunk {
  kv::NodeId node = -1;
  Sequence* own = nullptr;
  std::int64_t begin = 0, tokens = 0;
};

// The pool slot of token `index` of a run of pages that starts at `first_slot` of pages[0].
inline std::int32_t slot_of(const std::vector<std::int32_t>& pages, int first_slot, std::int64_t index,
                            int page_size) {
  const std::int64_t at = first_slot + index;
  return static_cast<std::int32_t>(pages[static_cast<std::size_t>(at / page_size)] * page_size + at % page_size);
}

// Tokens seq still has to prefill: its tree path's unfilled ones (a node already in `counted`
// is skipped; each counted node is added) and its own slots.
std::int64_t prefill_backlog(const Sequence& seq, const kv::RadixTree& tree, std::unordered_set<kv::NodeId>& counted);

// Whether every node of seq's tree path has its K/V (or a launched step computes it).
bool tree_path_filled(const Sequence& seq, const kv::RadixTree& tree);

// The copy of seq's unshared prompt (its tree path filled) from the tree into its own pages:
// appends the slots to src/dst and moves its tree lock up to where its sharing ends.
void copy_unshared_prompt(Sequence& seq, kv::RadixTree& tree, std::vector<std::int32_t>& src,
                          std::vector<std::int32_t>& dst);

// Books seq's next chunks (tree nodes, then own slots) while `budget` lasts; appends them to
// `out` and takes their tokens from the budget. Returns whether seq has nothing left to prefill.
bool take_prefill_chunks(Sequence& seq, kv::RadixTree& tree, std::int64_t& budget, std::vector<PrefillChunk>& out);

}  // namespace hydragen::engine
