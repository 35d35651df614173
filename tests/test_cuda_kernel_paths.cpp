// The CUDA kernel paths that a rule does not take on small random shapes, each forced through
// KernelOverrides (or reached by a plan built for it) against the float64 reference: the
// warp-specialized shared kernel on every plan, the shared kernels' lazy rescale at its bounds,
// head-split plans, the quad decode kernel, each decode build, the decode kernel's merges.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <optional>
#include <utility>

#include "attention_test_util.h"
#include "cuda_attention_test_util.h"
#include "hydragen/attention.h"
#include "paged_test_util.h"
#ifdef HYDRAGEN_WITH_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/paged_attention_runner.h"
#endif

namespace hydragen {
namespace {

using testing::Rng;

// The warp-specialized shared kernel (shared_attention_ws.cuh) forced for every plan
// (KernelOverrides::shared; HYDRAGEN_SHARED_KERNEL=ws) against the float64 reference: d
// 128, GQA 1/4/8, page sizes 16 and 64, forests of depth 1-3 with segments that start inside
// pages (pieces its producer copies with cp.async), odd piece counts (a block's second piece
// empty), stacking forced on some trials, multi-token causal queries, and batches whose
// rows fill several 128-row tiles, so the producer's stage ring wraps across items. The plan
// options are taken under the same overrides, as the runner's splits follow one block per SM.
TEST(CudaAttention, WarpSpecializedSharedKernelMatchesReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int with_shared_items = 0;
  for (int trial = 0; trial < 24; ++trial) {
    cuda::KernelOverrides overrides;
    overrides.shared = cuda::SharedKernel::warp_specialized;
    testing::PagedShape shape;
    shape.page_size = trial / 2 % 2 ? 16 : 64;
    shape.head_dim = 128;
    shape.groups = rng.pick(std::vector<int>{1, 4, 8});
    shape.kv_heads = rng.uniform_int(1, 2);
    shape.depth = rng.uniform_int(1, 3);
    shape.max_roots = 2;
    shape.batch = trial >= 18 ? 300 : rng.pick(std::vector<int>{5, 16, 40});
    shape.segment_lengths = {1, 63, 64, 65, 191, 700, 1500};
    shape.max_query_tokens = trial % 3 == 0 ? 5 : 1;
    shape.round_to_bf16 = true;
    const testing::PagedCase c = testing::random_paged_case(shape, rng);
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, 128, AttentionMode::hydragen, true, overrides);
    if (trial % 2)  // stack every shared segment
      options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    with_shared_items += !plan.shared_items.empty();
    const std::string what = concat("trial ", trial, " page ", shape.page_size, " G ", shape.groups,
                                    " Hkv ", shape.kv_heads, " depth ", shape.depth, " batch ", shape.batch,
                                    " T<=", shape.max_query_tokens, " stacked ", plan.stacked_segments,
                                    " shared items ", plan.shared_items.size());
    cuda::LaunchChoice choice;
    testing::expect_matches_reference(c, plan, overrides, what, &choice);
    EXPECT_EQ(choice.shared, cuda::SharedKernel::warp_specialized) << what;
  }
  EXPECT_GE(with_shared_items, 12) << "too few plans reached the shared kernel";
#endif
}

// The shared kernels' lazy rescaling (online_softmax_step, and the ws kernel's rescale_from_p
// where its same-max bet fails): keys that grow along each segment (up to 8x, so a row's max
// climbs past the lag again and again inside one item), keys that jump 32x halfway along a
// segment (scores ~150 log2 units above the max so far: 2^(s - m) overflows, and the ws kernel
// computes that block's S again by mma.sync) and plain random keys, with the lag at 0 (rescale
// on every new max), the default and the largest allowed (KernelOverrides::rescale_lag),
// through the warp-specialized kernel and the two-warpgroup kernel; every shared segment
// stacked. Against the float64 reference.
TEST(CudaAttention, SharedKernelsRescaleLazilyAndExactly) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int trials = 0;
  for (const cuda::SharedKernel kernel : {cuda::SharedKernel::warp_specialized, cuda::SharedKernel::wgmma})
    for (const float lag : {0.f, cuda::kRescaleLag, cuda::kMaxRescaleLag})
      for (const auto [growth, step] : {std::pair{0.0, 0.0}, std::pair{3.0, 0.0}, std::pair{0.0, 5.0}}) {
        cuda::KernelOverrides overrides;
        overrides.shared = kernel;
        overrides.rescale_lag = lag;
        const char* name = kernel == cuda::SharedKernel::wgmma ? "wgmma" : "ws";
        testing::PagedShape shape;
        shape.page_size = rng.pick(std::vector<int>{16, 64});
        shape.head_dim = 128;
        shape.groups = rng.pick(std::vector<int>{1, 4, 8});
        shape.kv_heads = rng.uniform_int(1, 2);
        shape.depth = rng.uniform_int(1, 2);
        shape.batch = rng.pick(std::vector<int>{16, 40});
        shape.segment_lengths = {65, 700, 1500, 2100};
        shape.round_to_bf16 = true;
        shape.key_growth = growth;
        shape.key_step = step;
        const testing::PagedCase c = testing::random_paged_case(shape, rng);
        plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, 128, AttentionMode::hydragen, true, overrides);
        options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
        const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
        ASSERT_FALSE(plan.shared_items.empty()) << name << " lag " << lag;
        const std::string what = concat(name, " lag ", lag, " growth ", growth, " step ", step, " page ", shape.page_size, " G ",
                                        shape.groups, " Hkv ", shape.kv_heads, " depth ", shape.depth, " batch ",
                                        shape.batch, " shared items ", plan.shared_items.size());
        testing::expect_matches_reference(c, plan, overrides, what);
        ++trials;
      }
  EXPECT_EQ(trials, 18);
#endif
}

// Head-split plans (PlanOptions::shared_head_splits: a stacked segment's first kv heads whole,
// the rest split finer, split-major; each merge group reads its own head's columns) through
// the device's kernels (the full-tile kernel for the shared launch, d 128) against the float64
// reference: MHA (6 heads, 2 tiles each) and GQA (3 heads x 4), page sizes 16 and 64, one-
// and three-token queries. The full-tile slots are forced low (the fewest from 3 up that split
// the heads differently) so that small shapes split by head.
TEST(CudaAttention, HeadSplitPlansMatchReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (int trial = 0; trial < 4; ++trial) {  // (in the sanitizers' reduced set: kept small)
    testing::PagedShape shape;
    shape.page_size = trial % 2 ? 16 : 64;
    shape.head_dim = 128;
    shape.kv_heads = trial >= 2 ? 3 : 6;
    shape.groups = shape.kv_heads == 3 ? 4 : 1;
    shape.batch = shape.kv_heads == 3 ? 64 : 256;  // 256 rows per kv head: two full tiles
    shape.segment_lengths = {2048};
    shape.max_query_tokens = trial % 2 ? 3 : 1;
    shape.round_to_bf16 = true;
    const testing::PagedCase c = testing::random_paged_case(shape, rng);
    const plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, 128, AttentionMode::hydragen, true);
    bool differ = false;
    const plan::AttentionPlan plan = testing::head_split_plan(c.layout, options, differ);
    const std::string what = concat("trial ", trial, " page ", shape.page_size, " Hkv ", shape.kv_heads, " G ",
                                    shape.groups, " T<=", shape.max_query_tokens);
    ASSERT_TRUE(plan.shared_full_tiles) << what;
    ASSERT_TRUE(differ) << what << ": the heads' splits should differ";
    cuda::LaunchChoice choice;
    testing::expect_matches_reference(c, plan, {}, what, &choice);
    EXPECT_EQ(choice.shared, cuda::SharedKernel::warp_specialized) << what << ": the full-tile kernel runs the shared launch";
  }
#endif
}

// The four-lanes-per-item decode kernel (decode_quad.cuh), forced, against the float64
// reference: one-row items alone in their merge group (MHA decode) with suffixes on and around
// the 64-key pieces, empty ones, one or several stacked columns to merge (depth 1-3, forced
// stacking), page sizes 16 and 64, d 64 and 128, bf16, half the trials with the suffix launch
// a programmatic dependent of the shared launch (KernelOverrides::pdl); plans it does not serve
// (split suffixes, GQA rows, two query tokens) must fall back to the warp kernel, and do. Trials that neither split suffixes
// nor have GQA rows or two query tokens are lone-row plans by construction: all must run it.
TEST(CudaAttention, QuadDecodeKernelMatchesReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int quad_runs = 0, fallbacks = 0, lone_by_design = 0;
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  for (int trial = 0; trial < 16; ++trial) {
    const bool pdl = trial / 4 % 2 == 1;
    cuda::KernelOverrides overrides;
    overrides.suffix = cuda::SuffixKernel::quad;
    overrides.pdl = pdl ? cuda::Force::on : cuda::Force::off;
    testing::PagedShape shape;
    shape.page_size = trial % 2 ? 16 : 64;
    shape.head_dim = trial / 2 % 2 ? 64 : 128;
    shape.groups = trial % 8 == 7 ? 4 : 1;
    shape.kv_heads = rng.uniform_int(1, 3);
    shape.depth = rng.uniform_int(1, 3);
    shape.batch = trial >= 14 ? 1024 : rng.pick(std::vector<int>{5, 40, 130});
    shape.suffix_lengths = {0, 1, 2, 3, 4, 5, 63, 64, 65, 128, 200};
    shape.max_query_tokens = trial % 8 == 3 ? 2 : 1;
    shape.round_to_bf16 = true;
    const AttentionMode mode = trial % 4 == 2 ? AttentionMode::paged : AttentionMode::hydragen;
    const testing::PagedCase c = testing::random_paged_case(shape, rng);
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, shape.head_dim, mode, true);
    // Split suffixes (not the quad kernel's), or none at all. The last GQA trial as one-row
    // suffix items (PlanOptions::suffix_tile_rows = 1, e8): lone rows too.
    options.suffix_min_split_tokens = trial % 5 == 4 ? 32 : std::int64_t{1} << 40;
    if (trial == 15) options.suffix_tile_rows = 1;
    else if (shape.groups > 1) options.suffix_tile_rows = plan::kSuffixTileRows;  // GQA rows tiled: not served
    const bool lone = (shape.groups == 1 || trial == 15) && shape.max_query_tokens == 1 && trial % 5 != 4;
    lone_by_design += lone;
    if (mode == AttentionMode::hydragen && trial % 3 == 0)
      options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    cuda::LaunchChoice choice;
    const AttentionState got = testing::run_on_device(c, plan, overrides, &choice);
    const AttentionState ref = reference_tree_attention(c.tree, c.q);
    const bool quad = choice.suffix == cuda::SuffixKernel::quad;
    EXPECT_EQ(choice.suffix_after_shared, pdl && major >= 9);  // (sm_90 and later only)
    const std::string what = concat("trial ", trial, " ", mode_name(mode), " page ", shape.page_size, " d ",
                                    shape.head_dim, " G ", shape.groups, " Hkv ", shape.kv_heads, " depth ", shape.depth,
                                    " batch ", shape.batch, " T<=", shape.max_query_tokens, " stacked ",
                                    plan.stacked_segments, quad ? " (quad)" : " (warp)", pdl ? " pdl" : "");
    if (lone) EXPECT_TRUE(quad) << what;
    EXPECT_EQ(quad, !plan.suffix_items.empty() && cuda::PlanSummary::of(plan).lone_rows) << what;
    quad_runs += quad;
    fallbacks += !quad;
    EXPECT_LE(testing::relative_norm_error(got.o, ref.o), 5e-3) << what;
    testing::expect_lse_near(got.lse, ref.lse, what);
  }
  EXPECT_GE(quad_runs, lone_by_design);
  EXPECT_GE(lone_by_design, 8);
  EXPECT_GT(fallbacks, 0);
#endif
}

// The decode kernel's builds on the same plans (KernelOverrides::decode_build): the narrow one
// (one-row items only), the one-path builds a plan gets by rule from its rows (four-row: items
// of 3-4 rows, eight-row: 5-8) and the general one for every plan, against the float64
// reference. One- and two-row items (MHA, T <= 2)
// whose suffixes end on and around chunk (32 keys) and piece (64 keys) boundaries, empty ones,
// split (the ticket merge) and unsplit, under stacked and unstacked prefixes; page sizes 16 and
// 64, d 64 and 128; plans with 2-row (T = 2), 3-, 4-, 6- and 8-row (GQA) items, where forcing
// narrow must fall back to a wider build (whose items of 3-8 rows run on the tensor cores); the
// last two trials have 4096 items, the last of them 8-row GQA items.
TEST(CudaAttention, NarrowAndWideDecodeKernelsMatchReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int narrow_runs = 0, wide_fallbacks = 0, four_runs = 0, eight_runs = 0, general_runs = 0;
  for (int trial = 0; trial < 18; ++trial) {
    const bool many = trial >= 16;
    testing::PagedShape shape;
    shape.page_size = trial % 2 ? 16 : 64;
    shape.head_dim = trial / 2 % 2 ? 64 : 128;
    shape.groups = trial % 8 == 7 ? 4 : trial == 5 ? 3 : trial == 14 ? 6 : trial == 10 || trial == 17 ? 8 : 1;
    shape.kv_heads = many ? 4 : rng.uniform_int(1, 3);
    shape.depth = rng.uniform_int(1, 2);
    shape.batch = many ? (trial == 17 ? 256 : 1024) : rng.pick(std::vector<int>{5, 40});
    shape.suffix_lengths = {0, 1, 2, 31, 32, 33, 63, 64, 65, 97, 128, 200};
    shape.max_query_tokens = trial % 4 == 3 ? 2 : 1;
    shape.round_to_bf16 = true;
    const AttentionMode mode = trial / 4 == 2 ? AttentionMode::paged : AttentionMode::hydragen;
    const testing::PagedCase c = testing::random_paged_case(shape, rng);
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, shape.head_dim, mode, true);
    if (trial % 3 == 1) options.suffix_min_split_tokens = 32;  // split suffixes: the ticket merge
    options.suffix_tile_rows = plan::kSuffixTileRows;  // GQA rows tiled (not one-row items by rule)
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    bool narrow_rows = true;
    for (const plan::PlanItem& it : plan.suffix_items) narrow_rows &= it.row_count <= 1;
    const AttentionState ref = reference_tree_attention(c.tree, c.q);
    const cuda::DecodeBuild by_rule = cuda::decode_build_rule(cuda::PlanSummary::of(plan));
    for (const auto forced : {std::optional{cuda::DecodeBuild::narrow}, std::optional<cuda::DecodeBuild>{},
                              std::optional{cuda::DecodeBuild::general}}) {
      cuda::KernelOverrides overrides;
      overrides.suffix = cuda::SuffixKernel::decode;  // (not the quad kernel for lone one-row items)
      overrides.decode_build = forced;
      const cuda::DecodeBuild build = forced == cuda::DecodeBuild::general                  ? cuda::DecodeBuild::general
                                      : forced == cuda::DecodeBuild::narrow && narrow_rows ? cuda::DecodeBuild::narrow
                                                                                            : by_rule;
      cuda::LaunchChoice choice;
      const AttentionState got = testing::run_on_device(c, plan, overrides, &choice);
      const char* width = !forced ? "by rule" : *forced == cuda::DecodeBuild::narrow ? "narrow" : "general";
      const std::string what = concat("trial ", trial, " ", width, " ", mode_name(mode), " page ", shape.page_size,
                                      " d ", shape.head_dim, " G ", shape.groups, " Hkv ", shape.kv_heads, " batch ",
                                      shape.batch, " T<=", shape.max_query_tokens, " stacked ",
                                      plan.stacked_segments, " build ", static_cast<int>(build));
      EXPECT_EQ(choice.suffix, cuda::SuffixKernel::decode) << what;
      EXPECT_EQ(choice.decode_build, build) << what;
      narrow_runs += build == cuda::DecodeBuild::narrow;
      wide_fallbacks += !narrow_rows && forced == cuda::DecodeBuild::narrow;
      four_runs += build == cuda::DecodeBuild::four, eight_runs += build == cuda::DecodeBuild::eight;
      general_runs += build == cuda::DecodeBuild::general;
      EXPECT_LE(testing::relative_norm_error(got.o, ref.o), 5e-3) << what;
      testing::expect_lse_near(got.lse, ref.lse, what);
    }
  }
  EXPECT_GT(narrow_runs, 0);
  EXPECT_GT(wide_fallbacks, 0);
  EXPECT_GE(four_runs, 2);   // trial 5's narrow fallback and by-rule runs
  EXPECT_GE(eight_runs, 6);  // trials 10, 14, 17
  EXPECT_GT(general_runs, 0);
#endif
}

// The only suffix item of its group with 4 or 8 rows (GQA decode under a split stacked prefix)
// merges in line when its (row, other column) pairs fit kInLinePairs: its own state never
// written, the other columns' lse fetched under its keys (merge_rows_in_line); one pair past
// that takes the ticket path. Each trial asserts how many items take which path, for head
// dims 128 and 64.
TEST(CudaAttention, LoneMultiRowItemsMergeInLine) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  struct Trial {
    int groups, head_dim;
    std::int64_t segment;
    bool in_line;  // every suffix item merges in line (else every one takes the ticket)
  };
  // The bound counts the kernel's R rows (4 for items of 3-4 rows, 8 for 5-8), not the item's:
  // 3 rows x 5 others would fit 16 pairs but not R = 4's four others per row.
  const Trial trials[] = {
      {4, 128, 256, true},    // 2 splits + own: 4 rows x 2 others
      {4, 128, 512, true},    // 4 splits: 4 x 4 = 16 pairs, the bound
      {4, 64, 512, true},
      {4, 128, 640, false},   // 5 splits: 20 pairs
      {3, 128, 640, false},   // 3 rows (R = 4) x 5 others: past R's four
      {3, 128, 512, true},    // 3 rows x 4 others
      {8, 128, 256, true},    // 8 x 2 = 16
      {8, 64, 256, true},
      {8, 128, 384, false},   // 8 x 3 = 24
      {5, 128, 384, false},   // 5 rows (R = 8) x 3 others
  };
  for (const Trial& t : trials) {
    testing::PagedShape shape;
    shape.page_size = 64;
    shape.head_dim = t.head_dim;
    shape.groups = t.groups;
    shape.kv_heads = 2;
    shape.batch = 6;
    shape.segment_lengths = {t.segment};
    shape.suffix_lengths = {1, 40, 100};
    shape.round_to_bf16 = true;
    const testing::PagedCase c = testing::random_paged_case(shape, rng);
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, shape.head_dim, AttentionMode::hydragen, true);
    options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1;
    options.fold_when_stacking_saves_little = false;
    options.shared_min_split_tokens = options.shared_short_split_tokens = 128;
    options.shared_slots = options.shared_full_tile_slots = options.suffix_slots = 1 << 20;
    options.suffix_min_split_tokens = 128;  // no suffix split: every suffix item alone in its group
    options.suffix_tile_rows = plan::kSuffixTileRows;
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    // Items of sequences under no segment (random_paged_case hangs a few at the root) have no
    // other column: they write their rows directly.
    int in_line = 0, ticket = 0, alone = 0;
    for (const plan::PlanItem& it : plan.suffix_items) {
      const plan::PlanMergeGroup& g = plan.groups[static_cast<std::size_t>(it.group)];
      ASSERT_EQ(g.items, 1);
      ASSERT_EQ(it.row_count, t.groups);
      const int kernel_rows = it.row_count <= 4 ? 4 : 8;  // the decode kernel's R for 3-8 rows
      if (g.columns == 1) ++alone;
      else (kernel_rows * (g.columns - 1) <= cuda::kInLinePairs ? in_line : ticket) += 1;
    }
    const std::string what = concat("G ", t.groups, " d ", t.head_dim, " segment ", t.segment, " columns ",
                                    plan.max_columns, " in line ", in_line, " ticket ", ticket, " alone ", alone);
    const int merging = static_cast<int>(plan.suffix_items.size()) - alone;
    EXPECT_GE(merging, 1) << what;
    EXPECT_EQ(in_line, t.in_line ? merging : 0) << what;
    EXPECT_EQ(ticket, t.in_line ? 0 : merging) << what;
    cuda::KernelOverrides overrides;
    overrides.suffix = cuda::SuffixKernel::decode;
    testing::expect_matches_reference(c, plan, overrides, what);
  }
#endif
}

// The decode kernel's merges of many columns (decode_merge.cuh), each path: one-row items alone
// in their group with 3..32 columns (in registers, the lse fetched under the keys) and with
// more (chunked merge); split suffixes (groups of several items) through the merge launch
// (split_merge_kernel: fewer splits than rows, more, past 32 columns) and, with the merge
// launch forced off, through the last arrival (a one-row group in registers from the buffer;
// 4- and 8-row groups batched); each through the narrow (or by-rule) and the general build.
// Each trial checks that its plan has the columns and the splits it is meant to cover, and
// which launches ran.
TEST(CudaAttention, DecodeMergesOfManyColumnsMatchReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  struct Trial {
    AttentionMode mode;
    int groups, head_dim, batch;
    std::int64_t segment, suffix;
    int min_columns, max_columns;  // the plan's widest merge group must fall in this range
    int min_splits, max_splits;    // ... and its most items (suffix splits) in this one
  };
  const Trial trials[] = {
      {AttentionMode::hydragen, 1, 128, 3, 2000, 40, 3, 32, 1, 1},     // one row alone: in registers, lse early
      {AttentionMode::hydragen, 1, 64, 3, 9000, 40, 33, 120, 1, 1},    // one row alone past 32 columns: chunked
      {AttentionMode::hydragen, 1, 128, 3, 1000, 600, 3, 32, 2, 8},    // one row, split suffix
      {AttentionMode::paged, 1, 128, 2, 0, 20000, 33, 64, 33, 64},     // one row, split past 32 columns
      {AttentionMode::hydragen, 4, 128, 2, 5000, 70, 3, 80, 1, 1},     // 4-row items alone: batched merge
      {AttentionMode::paged, 8, 128, 1, 0, 40000, 33, 64, 33, 64},     // 8-row split suffix: more splits than rows
      {AttentionMode::paged, 8, 128, 2, 0, 400, 3, 3, 3, 3},           // 8 rows over 3 splits: 3 rows per warp
      {AttentionMode::paged, 6, 64, 3, 0, 700, 5, 5, 5, 5},            // 6 rows over 5 splits, d 64
      {AttentionMode::hydragen, 8, 64, 2, 9000, 300, 33, 80, 2, 3},    // 8-row split suffix under 65 shared columns
  };

  for (const Trial& t : trials) {
    testing::PagedShape shape;
    shape.page_size = 64;
    shape.head_dim = t.head_dim;
    shape.groups = t.groups;
    shape.kv_heads = 2;
    shape.batch = t.batch;
    shape.segment_lengths = {t.segment};
    shape.suffix_lengths = {t.suffix};
    shape.round_to_bf16 = true;
    shape.parentless_sequences = false;  // the columns asked for need the segment
    const testing::PagedCase c = testing::random_paged_case(shape, rng);
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, shape.head_dim, t.mode, true);
    options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1;
    options.fold_when_stacking_saves_little = false;
    options.shared_min_split_tokens = options.shared_short_split_tokens = 128;
    options.shared_slots = options.shared_full_tile_slots = options.suffix_slots = 1 << 20;
    options.suffix_min_split_tokens = 128;
    options.suffix_tile_rows = plan::kSuffixTileRows;
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    const std::string what = concat(mode_name(t.mode), " G ", t.groups, " d ", t.head_dim, " batch ", t.batch,
                                    " segment ", t.segment, " suffix ", t.suffix, " columns ", plan.max_columns);
    EXPECT_GE(plan.max_columns, t.min_columns) << what;
    EXPECT_LE(plan.max_columns, t.max_columns) << what;
    int splits = 0;
    for (const plan::PlanMergeGroup& g : plan.groups) splits = std::max(splits, g.items);
    EXPECT_GE(splits, t.min_splits) << what;
    EXPECT_LE(splits, t.max_splits) << what;
    const AttentionState ref = reference_tree_attention(c.tree, c.q);
    for (const cuda::DecodeBuild build : {cuda::DecodeBuild::narrow, cuda::DecodeBuild::general})
      for (const bool merge_launch : {true, false}) {
        cuda::KernelOverrides overrides;
        overrides.suffix = cuda::SuffixKernel::decode;
        overrides.decode_build = build;
        overrides.merge_launch = merge_launch ? cuda::Force::on : cuda::Force::off;
        cuda::LaunchChoice choice;
        const AttentionState got = testing::run_on_device(c, plan, overrides, &choice);
        const std::string run = concat(what, build == cuda::DecodeBuild::narrow ? " narrow" : " general",
                                       merge_launch ? "" : " merge launch off");
        EXPECT_EQ(choice.merge_launch, splits > 1 && merge_launch) << run;
        EXPECT_LE(testing::relative_norm_error(got.o, ref.o), 5e-3) << run;
        testing::expect_lse_near(got.lse, ref.lse, run);
      }
  }
#endif
}

}  // namespace
}  // namespace hydragen
