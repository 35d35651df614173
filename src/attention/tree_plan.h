// The host-side plan of a sharing tree: who reads what. Every attention mode and backend
// works from it: for each segment, the sequences below it and their query rows (the rows
// that are stacked into one attention call over the segment); for each sequence, its path
// and where its query rows start.
#pragma once

#include <cstdint>
#include <vector>

#include "hydragen/attention.h"

namespace hydragen {

// The query rows [first_row, first_row + tokens) of one sequence.
struct QueryRowRange {
  int sequence = 0;
  std::int64_t first_row = 0;
  std::int64_t tokens = 0;
};

struct SegmentPlan {
  int depth = 0;                        // 0 for a root
  std::vector<QueryRowRange> readers;   // every sequence below this segment, in sequence order
  std::int64_t reader_rows = 0;         // sum of readers' tokens
};

struct SequencePlan {
  std::vector<int> path;        // segment indices, root first
  std::int64_t first_row = 0;   // its query rows in q: [first_row, first_row + query_tokens)
  std::int64_t query_tokens = 1;
};

struct TreePlan {
  std::vector<SegmentPlan> segments;    // indexed like SharingTree::segments
  std::vector<SequencePlan> sequences;  // indexed like SharingTree::sequences
  int max_depth = 0;                    // longest path, in segments
  std::int64_t query_rows = 0;
};

// The tree must be valid (SharingTree::validate).
TreePlan build_tree_plan(const SharingTree& tree);

}  // namespace hydragen
