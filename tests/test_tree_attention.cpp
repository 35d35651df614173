// tree_attention in every mode, attend() and hydragen_attention against the float64
// reference (plain full attention over each sequence's concatenated context) on random
// trees. All of them page the tree (segments back to back, so most start inside a page) and
// run the engine's plan on the CPU. Metric: relative_max_error (max |out − ref| / max |ref|)
// <= 1e-5, no NaN.
#include <chrono>
#include <numeric>

#include "attention_test_util.h"

namespace hydragen::testing {
namespace {

constexpr double kTolerance = 1e-5;
const std::vector<std::int64_t> kSegmentLengths{0, 1, 7, 64, 513};

struct TreeShape {
  int depth;        // levels of shared segments (1–4)
  int fanout;       // children per segment drawn from 1..fanout
  int batch;        // sequences
  int heads, kv_heads, head_dim;
  int query_tokens;
  bool causal = true;
  DType dtype = DType::f32;
  int page_size = 64;
};

std::string describe(const TreeShape& s) {
  return concat("depth ", s.depth, " fanout ", s.fanout, " batch ", s.batch, " Hq ", s.heads, " Hkv ", s.kv_heads,
                " d ", s.head_dim, " T ", s.query_tokens, s.causal ? " causal " : " ", dtype_name(s.dtype), " page ",
                s.page_size);
}

// Segments level by level (the root level has 1 or 2 roots, a forest); sequences hang under
// random segments of the deepest level, some under inner segments, a few under none.
SharingTree random_tree(const TreeShape& shape, Rng& rng) {
  SharingTree tree;
  auto kv = [&](std::int64_t len) { return random_tensor({len, shape.kv_heads, shape.head_dim}, shape.dtype, rng); };
  auto add_segment = [&](int parent) {
    const std::int64_t len = rng.pick(kSegmentLengths);
    tree.segments.push_back({parent, kv(len), kv(len)});
    return static_cast<int>(tree.segments.size()) - 1;
  };
  std::vector<int> level{add_segment(kNoParent)};
  if (shape.fanout > 1 && rng.uniform_int(0, 1)) level.push_back(add_segment(kNoParent));
  for (int d = 1; d < shape.depth; ++d) {
    std::vector<int> next;
    for (int parent : level) {
      const int children = rng.uniform_int(1, shape.fanout);
      for (int c = 0; c < children && next.size() < 96; ++c) next.push_back(add_segment(parent));
    }
    level = next;
  }
  for (int b = 0; b < shape.batch; ++b) {
    const int roll = rng.uniform_int(0, 19);
    const int parent = roll == 0 ? kNoParent
                     : roll <= 2 ? rng.uniform_int(0, static_cast<int>(tree.segments.size()) - 1)
                                 : rng.pick(level);
    std::int64_t len = rng.pick(kSegmentLengths);
    if (shape.causal && shape.query_tokens > 1) len = std::max<std::int64_t>(len, shape.query_tokens);
    tree.sequences.push_back({parent, kv(len), kv(len), shape.query_tokens});
  }
  return tree;
}

// Sequence s's whole context (path segments, then suffix) as one contiguous tensor.
Tensor concatenated_context(const SharingTree& tree, int s, bool values) {
  const Sequence& sequence = tree.sequences[s];
  Tensor out = Tensor::empty({tree.context_tokens(s), sequence.k.size(1), sequence.k.size(2)}, sequence.k.dtype());
  std::int64_t at = 0;
  auto append = [&](const Tensor& run) {
    out.slice(0, at, at + run.size(0)).copy_from(run);
    at += run.size(0);
  };
  for (int segment : tree.path(s)) append(values ? tree.segments[segment].v : tree.segments[segment].k);
  append(values ? sequence.v : sequence.k);
  return out;
}

AttentionState rows_of(const AttentionState& state, std::int64_t first, std::int64_t count) {
  return {state.o.slice(0, first, first + count).clone(), state.lse.slice(0, first, first + count).clone()};
}

void check_tree(const TreeShape& shape) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  SCOPED_TRACE(describe(shape));
  const SharingTree tree = random_tree(shape, rng);
  const Tensor q = random_tensor({tree.query_rows(), shape.heads, shape.head_dim}, shape.dtype, rng);
  TreeAttentionOptions options;
  options.causal = shape.causal;
  options.page_size = shape.page_size;
  const auto start = std::chrono::steady_clock::now();
  const AttentionState reference = reference_tree_attention(tree, q, options);
  const auto reference_done = std::chrono::steady_clock::now();
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    options.mode = mode;
    expect_state_near(tree_attention(tree, q, options), reference, kTolerance, mode_name(mode));
  }
  // attend() on a few sequences' concatenated contexts gives the same rows.
  std::int64_t first_row = 0;
  for (int s = 0; s < static_cast<int>(tree.sequences.size()); ++s) {
    const std::int64_t tokens = tree.sequences[s].query_tokens;
    if (s % 37 == 0) {
      AttentionOptions attend_options;
      attend_options.causal = shape.causal;
      const AttentionState state = attend(q.slice(0, first_row, first_row + tokens), concatenated_context(tree, s, false),
                                          concatenated_context(tree, s, true), attend_options);
      expect_state_near(state, rows_of(reference, first_row, tokens), kTolerance, concat("attend, sequence ", s));
    }
    first_row += tokens;
  }
  const double reference_s = std::chrono::duration<double>(reference_done - start).count();
  const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("  %s: %zu segments, %d sequences, reference %.2f s, all %.2f s\n", describe(shape).c_str(),
              tree.segments.size(), shape.batch, reference_s, total_s);
}

// Sizes: every listed property appears (depth 1–4, fan-out up to 64, batch 256, GQA 1/4/8,
// d 64/128, T 1 and 5 causal, lengths 0..513) without running every combination, so the
// suite stays within a few minutes on 2 cores.
TEST(TreeAttention, SingleSequenceSingleHead) { check_tree({1, 1, 1, 1, 1, 64, 1}); }
TEST(TreeAttention, OnePrefixBatch256Gqa8) { check_tree({1, 1, 256, 8, 1, 128, 1}); }
TEST(TreeAttention, FanOut64Gqa4Page16) { check_tree({2, 64, 256, 16, 4, 64, 1, true, DType::f32, 16}); }
TEST(TreeAttention, Depth4Gqa4FiveCausalTokens) { check_tree({4, 3, 48, 32, 8, 128, 5}); }
TEST(TreeAttention, Depth3Gqa1FiveCausalTokensBf16Page16) { check_tree({3, 4, 48, 8, 8, 64, 5, true, DType::bf16, 16}); }
TEST(TreeAttention, Depth4Gqa8FiveCausalTokens) { check_tree({4, 2, 160, 8, 1, 64, 5}); }
TEST(TreeAttention, Depth2NonCausalTokensF16Page128) {
  check_tree({2, 5, 24, 8, 2, 128, 5, false, DType::f16, 128});
}

// A given softmax scale reaches the plan runner: every mode against the reference at that scale.
TEST(TreeAttention, GivenScaleMatchesReference) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const SharingTree tree = random_tree({2, 3, 12, 8, 2, 64, 3}, rng);
  const Tensor q = random_tensor({tree.query_rows(), 8, 64}, DType::f32, rng);
  TreeAttentionOptions options;
  options.scale = 0.31f;
  const AttentionState reference = reference_tree_attention(tree, q, options);
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    options.mode = mode;
    expect_state_near(tree_attention(tree, q, options), reference, kTolerance, mode_name(mode));
  }
}

TEST(TreeAttention, EmptyContextIsEmptyState) {
  SharingTree tree;
  tree.segments.push_back({kNoParent, Tensor::empty({0, 2, 64}, DType::f32), Tensor::empty({0, 2, 64}, DType::f32)});
  tree.sequences.push_back({0, Tensor::empty({0, 2, 64}, DType::f32), Tensor::empty({0, 2, 64}, DType::f32), 1});
  Rng rng;
  const Tensor q = random_tensor({1, 4, 64}, DType::f32, rng);
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    TreeAttentionOptions options;
    options.mode = mode;
    const AttentionState state = tree_attention(tree, q, options);
    for (std::int64_t i = 0; i < state.lse.numel(); ++i) EXPECT_EQ(state.lse.get(i), -INFINITY) << mode_name(mode);
    for (std::int64_t i = 0; i < state.o.numel(); ++i) EXPECT_EQ(state.o.get(i), 0.0) << mode_name(mode);
  }
}

// hydragen_attention on [B, S_max] suffix tensors equals the reference of the same tree.
void check_one_level(int batch, std::int64_t prefix, std::int64_t max_suffix, int tokens, int heads, int kv_heads,
                     int head_dim, bool four_d_query) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  SCOPED_TRACE(concat("batch ", batch, " prefix ", prefix, " max suffix ", max_suffix, " T ", tokens));
  const Tensor prefix_k = random_tensor({prefix, kv_heads, head_dim}, DType::f32, rng);
  const Tensor prefix_v = random_tensor({prefix, kv_heads, head_dim}, DType::f32, rng);
  const Tensor suffix_k = random_tensor({batch, max_suffix, kv_heads, head_dim}, DType::f32, rng);
  const Tensor suffix_v = random_tensor({batch, max_suffix, kv_heads, head_dim}, DType::f32, rng);
  std::vector<std::int64_t> lens(batch);
  for (auto& len : lens) len = rng.uniform_int(tokens > 1 ? tokens : 0, static_cast<int>(max_suffix));
  const Tensor q = four_d_query ? random_tensor({batch, tokens, heads, head_dim}, DType::f32, rng)
                                : random_tensor({batch, heads, head_dim}, DType::f32, rng);
  SharingTree tree;
  tree.segments.push_back({kNoParent, prefix_k, prefix_v});
  for (int b = 0; b < batch; ++b)
    tree.sequences.push_back({0, suffix_k.select(0, b).slice(0, 0, lens[b]), suffix_v.select(0, b).slice(0, 0, lens[b]),
                              tokens});
  const AttentionState reference =
      reference_tree_attention(tree, q.reshape({batch * static_cast<std::int64_t>(tokens), heads, head_dim}));
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    TreeAttentionOptions options;
    options.mode = mode;
    expect_state_near(hydragen_attention(q, prefix_k, prefix_v, suffix_k, suffix_v, lens, options), reference,
                      kTolerance, concat("hydragen_attention ", mode_name(mode)));
  }
}

TEST(HydragenAttention, Batch256Prefix513OneToken) { check_one_level(256, 513, 64, 1, 8, 1, 128, false); }
TEST(HydragenAttention, FiveCausalTokensGqa4) { check_one_level(16, 64, 70, 5, 16, 4, 64, true); }
TEST(HydragenAttention, EmptyPrefix) { check_one_level(8, 0, 7, 1, 4, 4, 64, false); }

}  // namespace
}  // namespace hydragen::testing
