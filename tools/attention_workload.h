// The random inputs of one attention benchmark point and the sharing trees each mode runs
// on. hydragen and paged run on the same tree (segments stored once); hydragen-root folds
// the level-2 segments into each suffix; dense gives every sequence its own full copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_report.h"
#include "hydragen/attention.h"

namespace hydragen::bench {

struct AttentionWorkload {
  Tensor prefix_k, prefix_v;              // [prefix, Hkv, d]
  std::vector<Tensor> level2_k, level2_v; // per group [level2, Hkv, d]
  std::vector<Tensor> suffix_k, suffix_v; // per sequence [suffix, Hkv, d]
  Tensor q;                               // [batch · query_tokens, Hq, d]
};

// Deterministic uniform [-1, 1) data from `seed`, converted to `dtype`.
AttentionWorkload make_workload(const AttentionPoint& point, DType dtype, std::uint64_t seed);

// The tree that `mode` attends: see the file comment.
SharingTree make_tree(const AttentionWorkload& workload, const AttentionPoint& point,
                      const std::string& mode);

}  // namespace hydragen::bench
