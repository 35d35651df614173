// CUDA tree attention against the float64 reference (test-backend-ops pattern): random
// trees and shapes, all three modes, bf16 and fp16, page sizes 16 and 64; segments that start
// inside a page; the plan runner against its CPU twin on the same plan. The kernel paths a
// rule does not take on these shapes: test_cuda_kernel_paths.cpp; launch order and graphs:
// test_cuda_launch_order.cpp. Skipped without a CUDA device.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <cmath>
#include <optional>
#include <utility>

#include "attention_test_util.h"
#include "backend/cpu/paged_attention_cpu.h"
#include "cuda_attention_test_util.h"
#include "hydragen/attention.h"
#include "hydragen/error.h"
#include "paged_test_util.h"

namespace hydragen {
namespace {

using testing::Rng;
using testing::TreeShape;

// Segments that start inside a page (random first_slot, children continuing on their parent's
// last page, shuffled page ids, NaN in every slot no segment owns) through every kernel: the
// shared launch's wgmma (d 128) and mma.sync kernels, the decode kernel's builds by rule and
// its general build; page sizes 16 and 64; against the float64 reference.
TEST(CudaAttention, SegmentsStartingInsidePagesMatchReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (int trial = 0; trial < 32; ++trial) {
    cuda::KernelOverrides overrides;
    if (trial % 2) overrides.shared = cuda::SharedKernel::mma;  // (else the device's choice: wgmma for d 128)
    if (trial / 2 % 2) overrides.decode_build = cuda::DecodeBuild::general;
    testing::PagedShape shape;
    shape.page_size = trial / 4 % 2 ? 16 : 64;
    shape.head_dim = trial / 8 % 2 ? 64 : 128;
    shape.groups = rng.pick(std::vector<int>{1, 4, 8});
    shape.kv_heads = rng.uniform_int(1, 2);
    shape.depth = rng.uniform_int(1, 3);
    shape.max_roots = 2;
    shape.batch = rng.pick(std::vector<int>{2, 5, 16, 40});
    shape.max_query_tokens = trial % 3 == 0 ? 5 : 1;
    shape.round_to_bf16 = true;
    const AttentionMode mode = trial / 16 ? AttentionMode::paged : AttentionMode::hydragen;
    const testing::PagedCase c = testing::random_paged_case(shape, rng);
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, shape.head_dim, mode, true, overrides);
    if (trial % 4 == 1)  // stack short ones too
      options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
    if (trial % 4 == 2) options.suffix_min_split_tokens = 32;  // split suffix reads
    if (trial % 5 == 0) options.suffix_tile_rows = plan::kSuffixTileRows;  // (else one-row GQA items by rule mostly)
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    const std::string what = concat("trial ", trial, " ", mode_name(mode), " shared ", trial % 2 ? "mma" : "auto",
                                    " decode ", trial / 2 % 2 ? "general" : "by rule", " page ", shape.page_size, " d ",
                                    shape.head_dim, " G ", shape.groups, " Hkv ", shape.kv_heads, " depth ", shape.depth,
                                    " batch ", shape.batch, " stacked ", plan.stacked_segments);
    testing::expect_matches_reference(c, plan, overrides, what);
  }
#endif
}

// Head dim 96 (Phi-3): every kernel and path that takes it against the float64 reference --
// the mma.sync shared kernel (the wgmma ones are d 128 only, so the device's choice falls
// back to it), the decode kernel's builds (scalar 1-2 rows, mma 3-8 rows, in-line and last-
// arrival merges), the quad kernel (lone one-row MHA items), the merge launch of split
// suffixes; bf16 and fp16, page sizes 16 and 64, causal multi-token rows.
TEST(CudaAttention, HeadDim96MatchesFloat64Reference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const std::vector<std::optional<cuda::DecodeBuild>> builds{std::nullopt, cuda::DecodeBuild::general,
                                                             cuda::DecodeBuild::narrow, cuda::DecodeBuild::four,
                                                             cuda::DecodeBuild::eight};
  for (int trial = 0; trial < 40; ++trial) {
    cuda::KernelOverrides overrides;
    overrides.decode_build = builds[trial % builds.size()];
    if (trial % 8 == 3) overrides.suffix = cuda::SuffixKernel::quad;
    if (trial % 6 == 5) overrides.merge_launch = cuda::Force::on;
    testing::PagedShape shape;
    shape.head_dim = 96;
    shape.page_size = trial / 5 % 2 ? 16 : 64;
    shape.groups = trial % 8 == 3 ? 1 : rng.pick(std::vector<int>{1, 2, 4, 8});
    shape.kv_heads = rng.uniform_int(1, 2);
    shape.depth = rng.uniform_int(1, 3);
    shape.max_roots = 2;
    shape.batch = rng.pick(std::vector<int>{1, 3, 16, 40});
    shape.max_query_tokens = trial % 3 == 0 ? 5 : 1;
    shape.round_to_bf16 = true;
    if (trial % 7 == 2) shape.segment_lengths.push_back(700);
    const AttentionMode mode = std::vector{AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}[trial % 3];
    shape.dense = mode == AttentionMode::dense;
    const testing::PagedCase c = testing::random_paged_case(shape, rng);
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, 96, mode, true, overrides);
    if (trial % 4 == 1)
      options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
    if (trial % 4 == 2) options.suffix_min_split_tokens = 32;
    if (trial % 5 == 0) options.suffix_tile_rows = plan::kSuffixTileRows;
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    const std::string what = concat("d 96 trial ", trial, " ", mode_name(mode), " page ", shape.page_size, " G ",
                                    shape.groups, " Hkv ", shape.kv_heads, " depth ", shape.depth, " batch ",
                                    shape.batch, " query tokens ", shape.max_query_tokens, " stacked ",
                                    plan.stacked_segments);
    testing::expect_matches_reference(c, plan, overrides, what);
  }
  for (int trial = 0; trial < 12; ++trial) {  // the tree API, fp16 too
    TreeShape shape;
    shape.head_dim = 96;
    shape.groups = rng.pick(std::vector<int>{1, 4, 8});
    shape.hkv = rng.pick(std::vector<int>{1, 2});
    shape.depth = 1 + trial % 3;
    shape.fanout = rng.uniform_int(1, 4);
    shape.batch = rng.pick(std::vector<int>{1, 5, 33});
    shape.max_query_tokens = trial % 4 == 3 ? 5 : 1;
    const DType dtype = trial % 2 ? DType::f16 : DType::bf16;
    const AttentionMode mode = std::vector{AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}[trial % 3];
    testing::check_against_reference(shape, dtype, mode, trial % 4 < 2 ? 64 : 16, rng,
                                     concat("d 96 tree trial ", trial, " mode ", mode_name(mode), " G ", shape.groups,
                                            " batch ", shape.batch, " dtype ", dtype_name(dtype)));
  }
#endif
}

// PagedAttentionRunner and its CPU twin cpu::run_attention_plan on the same plan: the bf16
// pool on the device, the same values in f32 on the CPU; every mode, splits forced on some.
TEST(CudaAttention, RunnerMatchesCpuPlanRunner) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (int trial = 0; trial < 12; ++trial) {
    testing::PagedShape shape;
    shape.page_size = trial % 2 ? 16 : 64;
    shape.head_dim = trial / 2 % 2 ? 64 : 128;
    shape.groups = rng.pick(std::vector<int>{1, 4, 8});
    shape.kv_heads = 2;
    shape.depth = rng.uniform_int(1, 3);
    shape.batch = rng.pick(std::vector<int>{3, 24});
    shape.max_query_tokens = trial % 3 == 0 ? 5 : 1;
    shape.round_to_bf16 = true;
    if (trial % 4 == 3) shape.segment_lengths.push_back(1500);
    const AttentionMode mode = std::vector{AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}[trial % 3];
    shape.dense = mode == AttentionMode::dense;
    const testing::PagedCase c = testing::random_paged_case(shape, rng);
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, shape.head_dim, mode, true);
    if (trial % 4 >= 2) options.suffix_min_split_tokens = 32;
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    const AttentionState gpu = testing::run_on_device(c, plan);
    AttentionState cpu{Tensor::empty(c.q.shape(), DType::f32), Tensor::empty({c.q.size(0), c.q.size(1)}, DType::f32)};
    cpu::run_attention_plan(plan, c.q, c.k_pool, c.v_pool, cpu.o, &cpu.lse);
    const std::string what = concat("trial ", trial, " ", mode_name(mode), " page ", shape.page_size, " d ",
                                    shape.head_dim, " G ", shape.groups, " batch ", shape.batch);
    EXPECT_FALSE(testing::has_nan(cpu.o)) << what;
    EXPECT_LE(testing::relative_norm_error(gpu.o, cpu.o), 5e-3) << what;
    testing::expect_lse_near(gpu.lse, cpu.lse, what);
  }
#endif
}

TEST(CudaAttention, RandomTreesMatchFloat64Reference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (int trial = 0; trial < 36; ++trial) {
    TreeShape shape;
    shape.head_dim = trial % 2 ? 64 : 128;
    shape.groups = rng.pick(std::vector<int>{1, 2, 4, 8});
    shape.hkv = rng.pick(std::vector<int>{1, 2, 3});
    shape.depth = 1 + trial % 3;
    shape.fanout = rng.uniform_int(1, 4);
    shape.batch = rng.pick(std::vector<int>{1, 2, 5, 16, 33, 64});
    shape.max_query_tokens = trial % 4 == 3 ? 5 : 1;
    const DType dtype = trial % 5 == 4 ? DType::f16 : DType::bf16;
    const AttentionMode mode = std::vector{AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}[trial % 3];
    const int page_size = trial % 4 < 2 ? 64 : 16;
    testing::check_against_reference(shape, dtype, mode, page_size, rng,
                            concat("trial ", trial, " mode ", mode_name(mode), " d ", shape.head_dim, " G ", shape.groups,
                                   " Hkv ", shape.hkv, " depth ", shape.depth, " batch ", shape.batch, " page ",
                                   page_size, " dtype ", dtype_name(dtype)));
  }
#endif
}

// Long segments and few sequences: split-KV in both kernels.
TEST(CudaAttention, SplitKvMatchesReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  TreeShape shape;
  shape.batch = 3;
  shape.segment_lengths = {2100};
  shape.suffix_lengths = {1100, 0};
  shape.max_query_tokens = 3;
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged})
    testing::check_against_reference(shape, DType::bf16, mode, 64, rng, concat("split-KV ", mode_name(mode)));
#endif
}

// Many sequences under a short shared prefix: many row tiles per segment.
TEST(CudaAttention, LargeBatchMatchesReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  TreeShape shape;
  shape.batch = 1024;
  shape.hkv = 2;
  shape.groups = 4;
  shape.head_dim = 64;
  shape.segment_lengths = {200};
  shape.suffix_lengths = {0, 3, 17};
  testing::check_against_reference(shape, DType::bf16, AttentionMode::hydragen, 16, rng, "batch 1024");
#endif
}

// MHA decode under a stacked prefix (CodeLlama-13B's shape, scaled down): one-row suffix items
// that are their merge group's only item, merging with the shared state in registers; some
// suffixes empty. Then long suffixes under the same prefix: split suffixes (ticket merge).
TEST(CudaAttention, MhaDecodeUnderStackedPrefixMatchesReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  TreeShape shape;
  shape.batch = 256;
  shape.hkv = 4;
  shape.groups = 1;
  shape.head_dim = 128;
  shape.segment_lengths = {300};
  shape.suffix_lengths = {1, 1, 1, 0};
  testing::check_against_reference(shape, DType::bf16, AttentionMode::hydragen, 64, rng, "MHA decode B=256");
  shape.head_dim = 64;
  testing::check_against_reference(shape, DType::f16, AttentionMode::hydragen, 16, rng, "MHA decode B=256 d64 f16");
  shape.batch = 3;
  shape.segment_lengths = {700};
  shape.suffix_lengths = {1500, 1};
  shape.max_query_tokens = 4;
  testing::check_against_reference(shape, DType::bf16, AttentionMode::hydragen, 64, rng, "MHA split suffix");
#endif
}

// The default shared kernel for plans of full 128-row tiles (the warp-specialized TMA kernel)
// in fp16 as well as bf16: 64 sequences x 4 rows per KV head under a 1000-token prefix, whose
// last piece is partial (TMA and cp.async fill the same stage), page sizes 64 and 16.
TEST(CudaAttention, FullTilePlansMatchReferenceInF16AndBf16) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  TreeShape shape;
  shape.batch = 64;
  shape.hkv = 2;
  shape.groups = 4;
  shape.head_dim = 128;
  shape.segment_lengths = {1000};
  shape.suffix_lengths = {1, 5, 0};
  for (const DType dtype : {DType::f16, DType::bf16})
    for (const int page_size : {64, 16})
      testing::check_against_reference(shape, dtype, AttentionMode::hydragen, page_size, rng,
                              concat("full tiles ", dtype_name(dtype), " page ", page_size));
#endif
}

// tree_attention with the tree's K/V already on the device: device-side copies into the pool
// (one suffix a strided view, every other token row of a wider buffer), the result left on the
// device; two calls in a row with nothing waited for between them, then both against the
// float64 reference. Device K/V of another dtype than q are refused by name.
TEST(CudaAttention, TreeAttentionOverDeviceKvStaysOnTheDevice) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  TreeShape shape;
  shape.depth = 2, shape.batch = 16, shape.hkv = 2, shape.groups = 4, shape.max_query_tokens = 3;
  const SharingTree host_tree = testing::random_tree(shape, DType::bf16, rng);
  SharingTree device_tree = host_tree, f32_tree = host_tree;
  for (auto* tree : {&device_tree, &f32_tree}) {
    const DType dtype = tree == &f32_tree ? DType::f32 : DType::bf16;
    for (Segment& s : tree->segments) s.k = s.k.to(dtype).to(Device::cuda), s.v = s.v.to(dtype).to(Device::cuda);
    for (Sequence& s : tree->sequences) s.k = s.k.to(dtype).to(Device::cuda), s.v = s.v.to(dtype).to(Device::cuda);
  }
  const Tensor& suffix = host_tree.sequences[0].k;
  Tensor wide = Tensor::zeros({suffix.size(0), 2, suffix.size(1), suffix.size(2)}, DType::bf16);
  wide.select(1, 0).copy_from(suffix);
  device_tree.sequences[0].k = wide.to(Device::cuda).select(1, 0);  // token rows 2 x Hkv x d apart
  const std::int64_t hq = std::int64_t{shape.hkv} * shape.groups;
  const Tensor q = testing::random_tensor({host_tree.query_rows(), hq, shape.head_dim}, DType::bf16, rng);
  const Tensor q_device = q.to(Device::cuda);
  const AttentionState ref = reference_tree_attention(host_tree, q);
  TreeAttentionOptions hydragen_options, dense_options;
  dense_options.mode = AttentionMode::dense;
  const AttentionState results[2] = {tree_attention(device_tree, q_device, hydragen_options),
                                     tree_attention(device_tree, q_device, dense_options)};
  for (const AttentionState& out : results) {
    const std::string what = &out == &results[0] ? "hydragen" : "dense";
    EXPECT_TRUE(out.o.device() == Device::cuda && out.o.dtype() == DType::bf16) << what;
    EXPECT_TRUE(out.lse.device() == Device::cuda && out.lse.dtype() == DType::f32) << what;
    EXPECT_LE(testing::relative_norm_error(out.o.to(Device::cpu), ref.o), 5e-3) << what;
    testing::expect_lse_near(out.lse.to(Device::cpu), ref.lse, what);
  }
  try {
    tree_attention(f32_tree, q_device);
    FAIL() << "f32 K/V on the device under a bf16 q should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("segment 0 k is f32 on cuda, expected bf16"), std::string::npos) << e.what();
  }
#endif
}

TEST(CudaAttention, UnsupportedHeadDimIsAClearError) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  TreeShape shape;
  shape.head_dim = 80;
  shape.batch = 2;
  const SharingTree tree = testing::random_tree(shape, DType::bf16, rng);
  const Tensor q = testing::random_tensor({tree.query_rows(), 8, 80}, DType::bf16, rng).to(Device::cuda);
  try {
    tree_attention(tree, q);
    FAIL() << "head_dim 80 should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 80"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("supported: 64, 96, 128"), std::string::npos) << e.what();
  }
#endif
}

// PlanCapacity::holds, the engine's test for a larger runner: every size counts, each alone.
// No GPU needed: host code.
TEST(CudaAttention, PlanCapacityHoldsEverySize) {
#ifdef HYDRAGEN_WITH_CUDA
  const cuda::PlanCapacity cap{10, 20, 30, 40, 50, 60, 70, 80};
  EXPECT_TRUE(cap.holds(cap));
  EXPECT_TRUE(cap.holds(cuda::PlanCapacity{}));
  for (int field = 0; field < 8; ++field) {
    cuda::PlanCapacity need = cap;
    std::int64_t* sizes[] = {&need.pages, &need.pieces, &need.rows, &need.shared_items, &need.suffix_items,
                             &need.groups, &need.state_entries, &need.merge_rows};
    ++*sizes[field];
    EXPECT_FALSE(cap.holds(need)) << "field " << field;
    EXPECT_TRUE(cap.max(need).holds(need)) << "field " << field;
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// The runner takes the lazy rescale's lag from its overrides, 0..kMaxRescaleLag, and names the
// field when refusing another. (Checked before any device work: no GPU needed.)
TEST(CudaAttention, RunnerRefusesARescaleLagOutOfRange) {
#ifdef HYDRAGEN_WITH_CUDA
  for (const float lag : {-1.f, cuda::kMaxRescaleLag + 1.f}) {
    cuda::KernelOverrides overrides;
    overrides.rescale_lag = lag;
    try {
      cuda::PagedAttentionRunner runner(DType::bf16, 128, 8, 1, cuda::PlanCapacity{}, overrides);
      ADD_FAILURE() << "lag " << lag << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rescale_lag"), std::string::npos) << e.what();
    }
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

}  // namespace
}  // namespace hydragen
