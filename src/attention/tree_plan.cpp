#include "attention/tree_plan.h"

#include <algorithm>

namespace hydragen {

TreePlan build_tree_plan(const SharingTree& tree) {
  TreePlan plan;
  plan.segments.resize(tree.segments.size());
  plan.sequences.resize(tree.sequences.size());
  std::int64_t row = 0;
  for (std::size_t s = 0; s < tree.sequences.size(); ++s) {
    SequencePlan& sequence = plan.sequences[s];
    sequence.path = tree.path(static_cast<int>(s));
    sequence.first_row = row;
    sequence.query_tokens = tree.sequences[s].query_tokens;
    row += sequence.query_tokens;
    plan.max_depth = std::max(plan.max_depth, static_cast<int>(sequence.path.size()));
    // A segment's depth is its position on any path through it; segments no sequence reads
    // keep depth 0 and no readers.
    for (std::size_t depth = 0; depth < sequence.path.size(); ++depth) {
      SegmentPlan& segment = plan.segments[sequence.path[depth]];
      segment.depth = static_cast<int>(depth);
      segment.readers.push_back({static_cast<int>(s), sequence.first_row, sequence.query_tokens});
      segment.reader_rows += sequence.query_tokens;
    }
  }
  plan.query_rows = row;
  return plan;
}

}  // namespace hydragen
