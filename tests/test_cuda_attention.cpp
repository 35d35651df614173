// CUDA tree attention against the float64 reference (test-backend-ops pattern): random
// trees and shapes, all three modes, bf16 and fp16, page sizes 16 and 64; segments that start
// inside a page through every kernel; the plan runner against its CPU twin on the same plan;
// plus the CUDA graph test (capture a step, change the plan, replay). Skipped without a CUDA
// device.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <cmath>
#include <utility>

#include "attention_test_util.h"
#include "backend/cpu/paged_attention_cpu.h"
#include "hydragen/attention.h"
#include "hydragen/error.h"
#include "paged_test_util.h"
#ifdef HYDRAGEN_WITH_CUDA
#include <cuda_runtime.h>

#include <cstdlib>
#include <initializer_list>
#include <optional>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/model_ops.h"
#include "backend/cuda/paged_attention_runner.h"
#endif

namespace hydragen {
namespace {

using testing::Rng;


struct TreeShape {
  int hkv = 1, groups = 8, head_dim = 128;
  int depth = 1, fanout = 4, batch = 8;
  std::vector<std::int64_t> segment_lengths = {0, 1, 7, 65, 130, 513};
  std::vector<std::int64_t> suffix_lengths = {0, 1, 9, 64, 100};
  int max_query_tokens = 1;
};

// A random tree: `depth` levels of segments (each node `fanout` children at most), then
// `batch` sequences hung under random deepest nodes; K/V in dtype.
SharingTree random_tree(const TreeShape& shape, DType dtype, Rng& rng) {
  SharingTree tree;
  std::vector<int> level = {kNoParent};
  for (int depth = 0; depth < shape.depth; ++depth) {
    std::vector<int> next;
    for (int parent : level) {
      const int children = depth == 0 ? 1 : rng.uniform_int(1, shape.fanout);
      for (int c = 0; c < children; ++c) {
        const std::int64_t len = rng.pick(shape.segment_lengths);
        next.push_back(static_cast<int>(tree.segments.size()));
        tree.segments.push_back({parent, testing::random_tensor({len, shape.hkv, shape.head_dim}, dtype, rng),
                                 testing::random_tensor({len, shape.hkv, shape.head_dim}, dtype, rng)});
      }
    }
    level = next;
  }
  for (int b = 0; b < shape.batch; ++b) {
    const std::int64_t len = rng.pick(shape.suffix_lengths);
    const int tokens = len == 0 ? 1 : rng.uniform_int(1, static_cast<int>(std::min<std::int64_t>(shape.max_query_tokens, len)));
    tree.sequences.push_back({rng.pick(level), testing::random_tensor({len, shape.hkv, shape.head_dim}, dtype, rng),
                              testing::random_tensor({len, shape.hkv, shape.head_dim}, dtype, rng), tokens});
  }
  return tree;
}

// ‖out − ref‖ / ‖ref‖ over o, and no NaN anywhere.
double relative_norm_error(const Tensor& out, const Tensor& ref) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    const double a = out.get(i), b = ref.get(i);
    if (std::isnan(a)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

void expect_lse_near(const Tensor& out, const Tensor& ref, const std::string& what) {
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    const double a = out.get(i), b = ref.get(i);
    ASSERT_FALSE(std::isnan(a)) << what << ": lse NaN at " << i;
    if (std::isinf(b)) {
      ASSERT_EQ(a, b) << what << ": lse at " << i;
    } else {
      ASSERT_NEAR(a, b, 2e-3 * std::max(1.0, std::abs(b))) << what << ": lse at " << i;
    }
  }
}

#ifdef HYDRAGEN_WITH_CUDA
void check_against_reference(const TreeShape& shape, DType dtype, AttentionMode mode, int page_size, Rng& rng,
                             const std::string& what) {
  const SharingTree tree = random_tree(shape, dtype, rng);
  const std::int64_t hq = std::int64_t{shape.hkv} * shape.groups;
  const Tensor q = testing::random_tensor({tree.query_rows(), hq, shape.head_dim}, dtype, rng);
  TreeAttentionOptions options;
  options.mode = mode;
  options.page_size = page_size;
  const AttentionState ref = reference_tree_attention(tree, q, options);
  const AttentionState out = tree_attention(tree, q.to(Device::cuda), options);
  EXPECT_TRUE(out.o.device() == Device::cuda && out.lse.device() == Device::cuda) << what << ": the result stays on the device";
  EXPECT_LE(relative_norm_error(out.o.to(Device::cpu), ref.o), 5e-3) << what;
  expect_lse_near(out.lse.to(Device::cpu), ref.lse, what);
}
#endif

#ifdef HYDRAGEN_WITH_CUDA
// Sets an environment variable for a scope (the runner reads its kernel overrides from the
// environment), then restores it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Runs `plan` with PagedAttentionRunner over the case's pool and q in bf16 on the device;
// outputs start as NaN. Returns o (widened to f32) and lse on the CPU.
// variant: where given, the runner's launch_variant() for the plan.
AttentionState run_on_device(const testing::PagedCase& c, const plan::AttentionPlan& plan, int shared_tile_rows,
                             int* variant = nullptr) {
  const std::int64_t rows = c.q.size(0), hq = c.q.size(1), d = c.q.size(2);
  cuda::PagedAttentionRunner runner(DType::bf16, static_cast<int>(d), static_cast<int>(hq), c.layout.kv_heads,
                                    cuda::PlanCapacity::of(plan), shared_tile_rows);
  runner.upload(plan);
  if (variant != nullptr) *variant = runner.launch_variant();
  runner.poison_states();
  const Tensor k = c.k_pool.to(DType::bf16).to(Device::cuda), v = c.v_pool.to(DType::bf16).to(Device::cuda);
  const Tensor q = c.q.to(DType::bf16).to(Device::cuda);
  Tensor out = Tensor::empty({rows, hq, d}, DType::bf16, Device::cuda);
  Tensor out_lse = Tensor::empty({rows, hq}, DType::f32, Device::cuda);
  EXPECT_EQ(cudaMemset(out.raw(), 0xff, out.bytes()), cudaSuccess);
  EXPECT_EQ(cudaMemset(out_lse.raw(), 0xff, out_lse.bytes()), cudaSuccess);
  cuda::PagedAttentionArgs args;
  args.q = q.raw(), args.k_pool = k.raw(), args.v_pool = v.raw(), args.out = out.raw();
  args.out_lse = out_lse.data<float>(), args.page_size = c.layout.page_size;
  runner.run(args);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {out.to(Device::cpu).to(DType::f32), out_lse.to(Device::cpu)};
}
#endif

// Segments that start inside a page (random first_slot, children continuing on their parent's
// last page, shuffled page ids, NaN in every slot no segment owns) through every kernel: the
// shared launch's wgmma (d 128) and mma.sync kernels, the suffix launch's decode and mma
// kernels; page sizes 16 and 64; against the float64 reference.
TEST(CudaAttention, SegmentsStartingInsidePagesMatchReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (int trial = 0; trial < 32; ++trial) {
    const char* shared_kernel = trial % 2 ? "mma" : nullptr;  // nullptr: the device's choice (wgmma for d 128)
    const char* suffix_kernel = trial / 2 % 2 ? "mma" : "decode";
    const ScopedEnv shared_env("HYDRAGEN_SHARED_KERNEL", shared_kernel);
    const ScopedEnv suffix_env("HYDRAGEN_SUFFIX_KERNEL", suffix_kernel);
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
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, shape.head_dim, mode, true);
    if (trial % 4 == 1)  // stack short ones too
      options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
    if (trial % 4 == 2) options.suffix_min_split_tokens = 32;  // split suffix reads
    if (trial % 5 == 0) options.suffix_tile_rows = plan::kSuffixTileRows;  // (else one-row GQA items by rule mostly)
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    const AttentionState out = run_on_device(c, plan, options.shared_tile_rows);
    const AttentionState ref = reference_tree_attention(c.tree, c.q);
    const std::string what = concat("trial ", trial, " ", mode_name(mode), " shared ", shared_kernel ? "mma" : "auto",
                                    " suffix ", suffix_kernel, " page ", shape.page_size, " d ", shape.head_dim, " G ",
                                    shape.groups, " Hkv ", shape.kv_heads, " depth ", shape.depth, " batch ", shape.batch,
                                    " stacked ", plan.stacked_segments);
    EXPECT_LE(relative_norm_error(out.o, ref.o), 5e-3) << what;
    expect_lse_near(out.lse, ref.lse, what);
  }
#endif
}

// The warp-specialized shared kernel (shared_attention_ws.cuh) forced for every plan, with and
// without turns (HYDRAGEN_SHARED_KERNEL=ws-pp-tma, ws-tma) against the float64 reference: d
// 128, GQA 1/4/8, page sizes 16 and 64, forests of depth 1-3 with segments that start inside
// pages (pieces its producer copies with cp.async), odd piece counts (a block's second piece
// empty), stacking forced on some trials, multi-token causal queries, and batches whose
// rows fill several 128-row tiles, so the producer's stage ring wraps across items. The plan
// options are taken under the variable, as the runner's splits follow one block per SM.
TEST(CudaAttention, WarpSpecializedSharedKernelMatchesReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int with_shared_items = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const char* kernels[] = {"ws-tma", "ws-pp-tma"};
    const char* kernel = kernels[trial % 2];
    const ScopedEnv shared_env("HYDRAGEN_SHARED_KERNEL", kernel);
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
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, 128, AttentionMode::hydragen, true);
    if (trial / 12 % 2 == trial % 2)  // stack every shared segment (half the trials of each kernel)
      options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    with_shared_items += !plan.shared_items.empty();
    const AttentionState out = run_on_device(c, plan, options.shared_tile_rows);
    const AttentionState ref = reference_tree_attention(c.tree, c.q);
    const std::string what = concat("trial ", trial, " ", kernel, " page ", shape.page_size, " G ", shape.groups,
                                    " Hkv ", shape.kv_heads, " depth ", shape.depth, " batch ", shape.batch,
                                    " T<=", shape.max_query_tokens, " stacked ", plan.stacked_segments,
                                    " shared items ", plan.shared_items.size());
    EXPECT_LE(relative_norm_error(out.o, ref.o), 5e-3) << what;
    expect_lse_near(out.lse, ref.lse, what);
  }
  EXPECT_GE(with_shared_items, 12) << "too few plans reached the shared kernel";
#endif
}

// The shared kernels' lazy rescaling (online_softmax_step, and the ws kernel's rescale_from_p
// where its same-max bet fails): keys that grow along each segment (up to 8x, so a row's max
// climbs past the lag again and again inside one item), keys that jump 32x halfway along a
// segment (scores ~150 log2 units above the max so far: 2^(s - m) overflows, and the ws kernel
// computes that block's S again by mma.sync) and plain random keys, with the lag at 0 (rescale
// on every new max), the default and the largest allowed, through the warp-specialized kernel
// (with and without turns) and the two-warpgroup kernel; every shared segment stacked. Against
// the float64 reference.
TEST(CudaAttention, SharedKernelsRescaleLazilyAndExactly) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const std::string lags[] = {"0", std::to_string(cuda::kRescaleLag), std::to_string(cuda::kMaxRescaleLag)};
  int trials = 0;
  for (const char* kernel : {"ws-pp-tma", "ws-tma", "wgmma"})
    for (const std::string& lag : lags)
      for (const auto [growth, step] : {std::pair{0.0, 0.0}, std::pair{3.0, 0.0}, std::pair{0.0, 5.0}}) {
        const ScopedEnv shared_env("HYDRAGEN_SHARED_KERNEL", kernel);
        const ScopedEnv lag_env("HYDRAGEN_RESCALE_LAG", lag.c_str());
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
        plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, 128, AttentionMode::hydragen, true);
        options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
        const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
        ASSERT_FALSE(plan.shared_items.empty()) << kernel << " lag " << lag;
        const AttentionState out = run_on_device(c, plan, options.shared_tile_rows);
        const AttentionState ref = reference_tree_attention(c.tree, c.q);
        const std::string what = concat(kernel, " lag ", lag, " growth ", growth, " step ", step, " page ", shape.page_size, " G ",
                                        shape.groups, " Hkv ", shape.kv_heads, " depth ", shape.depth, " batch ",
                                        shape.batch, " shared items ", plan.shared_items.size());
        EXPECT_LE(relative_norm_error(out.o, ref.o), 5e-3) << what;
        expect_lse_near(out.lse, ref.lse, what);
        ++trials;
      }
  EXPECT_EQ(trials, 27);
#endif
}

#ifdef HYDRAGEN_WITH_CUDA
// Each value of `bad` is refused by `parse` with an error that names `variable`.
template <class Parse>
void expect_refused(Parse parse, std::initializer_list<const char*> bad, const std::string& variable) {
  for (const char* value : bad) {
    try {
      parse(value);
      ADD_FAILURE() << "accepted " << variable << "=" << value;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(variable), std::string::npos) << e.what();
    }
  }
}
#endif

TEST(CudaDispatch, PdlFromTheEnvironmentIsChecked) {
#ifdef HYDRAGEN_WITH_CUDA
  EXPECT_EQ(cuda::parse_pdl_force(nullptr), -1);
  EXPECT_EQ(cuda::parse_pdl_force(""), -1);  // set but empty: as unset
  EXPECT_EQ(cuda::parse_pdl_force("0"), 0);
  EXPECT_EQ(cuda::parse_pdl_force("1"), 1);
  expect_refused([](const char* v) { cuda::parse_pdl_force(v); }, {"2", "on", "1 ", "-1"}, "HYDRAGEN_PDL");
#endif
}

TEST(CudaDispatch, RescaleLagFromTheEnvironmentIsChecked) {
#ifdef HYDRAGEN_WITH_CUDA
  EXPECT_EQ(cuda::parse_rescale_lag("0"), 0.f);
  EXPECT_EQ(cuda::parse_rescale_lag("8"), 8.f);
  EXPECT_EQ(cuda::parse_rescale_lag("2.5"), 2.5f);
  EXPECT_EQ(cuda::parse_rescale_lag(std::to_string(cuda::kMaxRescaleLag)), cuda::kMaxRescaleLag);
  expect_refused([](const char* v) { cuda::parse_rescale_lag(v); }, {"", "-1", "13", "eight", "8x", "nan"},
                 "HYDRAGEN_RESCALE_LAG");
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
    const AttentionState gpu = run_on_device(c, plan, options.shared_tile_rows);
    AttentionState cpu{Tensor::empty(c.q.shape(), DType::f32), Tensor::empty({c.q.size(0), c.q.size(1)}, DType::f32)};
    cpu::run_attention_plan(plan, c.q, c.k_pool, c.v_pool, cpu.o, &cpu.lse);
    const std::string what = concat("trial ", trial, " ", mode_name(mode), " page ", shape.page_size, " d ",
                                    shape.head_dim, " G ", shape.groups, " batch ", shape.batch);
    EXPECT_FALSE(testing::has_nan(cpu.o)) << what;
    EXPECT_LE(relative_norm_error(gpu.o, cpu.o), 5e-3) << what;
    expect_lse_near(gpu.lse, cpu.lse, what);
  }
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
    int variant = 0;
    const AttentionState out = run_on_device(c, plan, options.shared_tile_rows, &variant);
    EXPECT_TRUE(variant & 4) << what << ": the full-tile kernel runs the shared launch";
    const AttentionState ref = reference_tree_attention(c.tree, c.q);
    EXPECT_LE(relative_norm_error(out.o, ref.o), 5e-3) << what;
    expect_lse_near(out.lse, ref.lse, what);
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
    check_against_reference(shape, dtype, mode, page_size, rng,
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
    check_against_reference(shape, DType::bf16, mode, 64, rng, concat("split-KV ", mode_name(mode)));
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
  check_against_reference(shape, DType::bf16, AttentionMode::hydragen, 16, rng, "batch 1024");
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
  check_against_reference(shape, DType::bf16, AttentionMode::hydragen, 64, rng, "MHA decode B=256");
  shape.head_dim = 64;
  check_against_reference(shape, DType::f16, AttentionMode::hydragen, 16, rng, "MHA decode B=256 d64 f16");
  shape.batch = 3;
  shape.segment_lengths = {700};
  shape.suffix_lengths = {1500, 1};
  shape.max_query_tokens = 4;
  check_against_reference(shape, DType::bf16, AttentionMode::hydragen, 64, rng, "MHA split suffix");
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
      check_against_reference(shape, dtype, AttentionMode::hydragen, page_size, rng,
                              concat("full tiles ", dtype_name(dtype), " page ", page_size));
#endif
}

// The four-lanes-per-item decode kernel's two builds (decode_quad.cuh: four keys in flight,
// or one), forced, against the float64 reference: one-row items alone in their merge group
// (MHA decode) with suffixes on and around its 4-key blocks and the 64-key pieces, empty ones,
// one or several stacked columns to merge (depth 1-3, forced stacking), page sizes 16 and 64,
// d 64 and 128, bf16, half the trials with the suffix launch a programmatic dependent of the
// shared launch (HYDRAGEN_PDL=1); plans it does not serve (split suffixes, GQA rows, two
// query tokens) must fall back to the warp kernel, and do. Trials that neither split suffixes
// nor have GQA rows or two query tokens are lone-row plans by construction: all must run it.
TEST(CudaAttention, QuadDecodeKernelMatchesReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const ScopedEnv suffix_env("HYDRAGEN_SUFFIX_KERNEL", "decode");
  int quad_runs = 0, fallbacks = 0, lone_by_design = 0;
  int device = 0, major = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
  for (int trial = 0; trial < 16; ++trial) {
    const bool one_key = trial % 3 == 1, pdl = trial / 4 % 2 == 1;
    const ScopedEnv quad_env("HYDRAGEN_DECODE_KERNEL", one_key ? "quad1" : "quad");
    const ScopedEnv pdl_env("HYDRAGEN_PDL", pdl ? "1" : "0");
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
    int variant = 0;
    const AttentionState got = run_on_device(c, plan, options.shared_tile_rows, &variant);
    const AttentionState ref = reference_tree_attention(c.tree, c.q);
    const bool quad = (variant & 8) != 0;
    if (quad) EXPECT_EQ((variant & 16) != 0, one_key);
    EXPECT_EQ((variant & 32) != 0, pdl && major >= 9);  // (sm_90 and later only)
    const std::string what = concat("trial ", trial, " ", mode_name(mode), " page ", shape.page_size, " d ",
                                    shape.head_dim, " G ", shape.groups, " Hkv ", shape.kv_heads, " depth ", shape.depth,
                                    " batch ", shape.batch, " T<=", shape.max_query_tokens, " stacked ",
                                    plan.stacked_segments, quad ? (one_key ? " (quad1)" : " (quad)") : " (warp)",
                                    pdl ? " pdl" : "");
    if (lone) EXPECT_TRUE(quad) << what;
    EXPECT_EQ(quad, (variant & 1) != 0 && cuda::suffix_items_are_lone_rows(plan)) << what;
    quad_runs += quad;
    fallbacks += !quad;
    EXPECT_LE(relative_norm_error(got.o, ref.o), 5e-3) << what;
    expect_lse_near(got.lse, ref.lse, what);
  }
  EXPECT_GE(quad_runs, lone_by_design);
  EXPECT_GE(lone_by_design, 8);
  EXPECT_GT(fallbacks, 0);
#endif
}

// The decode kernel's builds on the same plans, forced (HYDRAGEN_DECODE_NARROW /
// HYDRAGEN_DECODE_WIDE / HYDRAGEN_DECODE_GENERAL): the narrow one (one-row items only), the
// one-path builds a wide plan gets by its rows (four-row: items of 3-4 rows, eight-row: 5-8)
// and the general one, against the float64 reference. One- and two-row items (MHA, T <= 2)
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
  const ScopedEnv suffix_env("HYDRAGEN_SUFFIX_KERNEL", "decode");
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
    struct Forced {
      const char* width;  // HYDRAGEN_DECODE_NARROW or _WIDE
      bool general;       // HYDRAGEN_DECODE_GENERAL too
    };
    for (const Forced forced : {Forced{"HYDRAGEN_DECODE_NARROW", false}, Forced{"HYDRAGEN_DECODE_WIDE", false},
                                Forced{"HYDRAGEN_DECODE_WIDE", true}}) {
      const char* width = forced.width;
      const ScopedEnv env(width, "1");
      const ScopedEnv general("HYDRAGEN_DECODE_GENERAL", forced.general ? "1" : nullptr);
      const int build = cuda::decode_build_rows(cuda::SuffixItemSummary::of(plan));
      int variant = 0;
      const AttentionState got = run_on_device(c, plan, options.shared_tile_rows, &variant);
      const bool narrow = (variant & 2) != 0;
      const std::string what = concat("trial ", trial, " ", width, " ", mode_name(mode), " page ", shape.page_size,
                                      " d ", shape.head_dim, " G ", shape.groups, " Hkv ", shape.kv_heads, " batch ",
                                      shape.batch, " T<=", shape.max_query_tokens, " stacked ",
                                      plan.stacked_segments, " build ", build);
      EXPECT_EQ(narrow, narrow_rows && std::string(width) == "HYDRAGEN_DECODE_NARROW") << what;
      EXPECT_EQ(narrow, build == 1) << what;
      EXPECT_EQ((variant & 64) != 0, build == 4) << what;
      EXPECT_EQ((variant & 128) != 0, build == 8) << what;
      narrow_runs += narrow;
      wide_fallbacks += !narrow_rows && std::string(width) == "HYDRAGEN_DECODE_NARROW";
      four_runs += build == 4, eight_runs += build == 8, general_runs += build == 0;
      EXPECT_LE(relative_norm_error(got.o, ref.o), 5e-3) << what;
      expect_lse_near(got.lse, ref.lse, what);
    }
  }
  EXPECT_GT(narrow_runs, 0);
  EXPECT_GT(wide_fallbacks, 0);
  EXPECT_GE(four_runs, 2);   // trial 5's narrow fallback and wide runs
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
  const ScopedEnv suffix_env("HYDRAGEN_SUFFIX_KERNEL", "decode");
  const ScopedEnv kernel_env("HYDRAGEN_DECODE_KERNEL", "warp");
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
    const AttentionState ref = reference_tree_attention(c.tree, c.q);
    const AttentionState got = run_on_device(c, plan, options.shared_tile_rows);
    EXPECT_LE(relative_norm_error(got.o, ref.o), 5e-3) << what;
    expect_lse_near(got.lse, ref.lse, what);
  }
#endif
}

// The decode kernel's merges of many columns (decode_merge.cuh), each path: one-row items alone
// in their group with 3..32 columns (in registers, the lse fetched under the keys) and with
// more (chunked merge); split suffixes (groups of several items) through the merge launch
// (split_merge_kernel: fewer splits than rows, more, past 32 columns) and, under
// HYDRAGEN_MERGE_LAUNCH=0, through the last arrival (a one-row group in registers from the
// buffer; 4- and 8-row groups batched). Each trial checks that its plan has the columns and
// the splits it is meant to cover, and which launches ran.
TEST(CudaAttention, DecodeMergesOfManyColumnsMatchReference) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const ScopedEnv suffix_env("HYDRAGEN_SUFFIX_KERNEL", "decode");
  const ScopedEnv kernel_env("HYDRAGEN_DECODE_KERNEL", "warp");
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
    for (const char* width : {"HYDRAGEN_DECODE_NARROW", "HYDRAGEN_DECODE_WIDE"})
      for (const bool merge_launch : {true, false}) {
        const ScopedEnv env(width, "1");
        const ScopedEnv merge_env("HYDRAGEN_MERGE_LAUNCH", merge_launch ? "1" : "0");
        int variant = 0;
        const AttentionState got = run_on_device(c, plan, options.shared_tile_rows, &variant);
        const std::string run = concat(what, " ", width, merge_launch ? "" : " merge launch off");
        EXPECT_EQ((variant & 256) != 0, splits > 1 && merge_launch) << run;
        EXPECT_LE(relative_norm_error(got.o, ref.o), 5e-3) << run;
        expect_lse_near(got.lse, ref.lse, run);
      }
  }
#endif
}

#ifdef HYDRAGEN_WITH_CUDA
// A plan of B sequences under one segment of `context` tokens, `suffix` own tokens each.
plan::AttentionPlan one_segment_plan(int batch, int kv_heads, int q_heads, std::int64_t context, std::int64_t suffix,
                                     AttentionMode mode) {
  plan::PlanOptions options;
  options.mode = mode;
  options.shared_slots = 264, options.suffix_slots = 1584;  // the H200's, as on the device
  return plan::build_attention_plan(testing::one_segment_layout(batch, kv_heads, q_heads, context, suffix), options);
}
#endif

// The plans the four-lanes-per-item decode kernel can serve: one-row suffix items, each alone
// in its merge group (MHA decode under a stacked prefix, and paged MHA over short contexts);
// not GQA rows or a long context split across items. Which it does serve (quad_decode_keys,
// its one-key build): items of one or two keys at any batch, up to kQuadMaxMeanKeys with many
// items; not 64-key suffixes or paged contexts; the environment forces. No GPU needed.
// The suffix launch follows the shared one as its programmatic dependent only where the
// shared items leave at least half of the SMs idle (the H200's 132 here). No GPU needed.
TEST(CudaDispatch, PdlOnlyWhereTheSharedLaunchLeavesHalfTheSmsIdle) {
#ifdef HYDRAGEN_WITH_CUDA
  EXPECT_TRUE(cuda::pdl_rule(64, 1, 132));    // llama-3-8b B=32 1K: 64 items of the one-per-SM kernel
  EXPECT_TRUE(cuda::pdl_rule(66, 1, 132));
  EXPECT_FALSE(cuda::pdl_rule(67, 1, 132));
  EXPECT_FALSE(cuda::pdl_rule(128, 1, 132));  // B=32 16K: the SMs are full
  EXPECT_TRUE(cuda::pdl_rule(132, 2, 132));   // two blocks per SM: 66 SMs busy
  EXPECT_FALSE(cuda::pdl_rule(133, 2, 132));
  EXPECT_FALSE(cuda::pdl_rule(0, 1, 132));    // no shared launch
#endif
}

TEST(CudaDispatch, QuadDecodeServesLoneOneRowItems) {
#ifdef HYDRAGEN_WITH_CUDA
  EXPECT_TRUE(cuda::suffix_items_are_lone_rows(one_segment_plan(1024, 40, 40, 16384, 1, AttentionMode::hydragen)));
  EXPECT_TRUE(cuda::suffix_items_are_lone_rows(one_segment_plan(1024, 40, 40, 2048, 64, AttentionMode::hydragen)));
  EXPECT_TRUE(cuda::suffix_items_are_lone_rows(one_segment_plan(1024, 40, 40, 1024, 1, AttentionMode::paged)));
  EXPECT_FALSE(cuda::suffix_items_are_lone_rows(one_segment_plan(64, 8, 32, 1024, 1, AttentionMode::hydragen)));
  EXPECT_FALSE(cuda::suffix_items_are_lone_rows(one_segment_plan(1, 40, 40, 32768, 1, AttentionMode::paged)));

  const ScopedEnv unset("HYDRAGEN_DECODE_KERNEL", nullptr);
  // Short items at any batch; up to kQuadMaxMeanKeys keys with >= kQuadManyItems items.
  EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(1024, 40, 40, 16384, 1, AttentionMode::hydragen)), 1);
  EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(64, 40, 40, 2048, 2, AttentionMode::hydragen)), 1);
  EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(64, 40, 40, 2048, 3, AttentionMode::hydragen)), 0);
  EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(1024, 40, 40, 2048, 3, AttentionMode::hydragen)), 1);
  EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(256, 40, 40, 2048, cuda::kQuadMaxMeanKeys, AttentionMode::hydragen)),
            1);
  EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(128, 40, 40, 2048, 8, AttentionMode::hydragen)), 0);  // 5120 items
  EXPECT_EQ(
      cuda::quad_decode_keys(one_segment_plan(1024, 40, 40, 2048, cuda::kQuadMaxMeanKeys + 1, AttentionMode::hydragen)),
      0);
  EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(1024, 40, 40, 2048, 64, AttentionMode::hydragen)), 0);
  EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(1024, 40, 40, 1024, 1, AttentionMode::paged)), 0);
  EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(64, 8, 32, 1024, 1, AttentionMode::hydragen)), 0);
  {
    const ScopedEnv warp("HYDRAGEN_DECODE_KERNEL", "warp");
    EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(1024, 40, 40, 16384, 1, AttentionMode::hydragen)), 0);
  }
  {
    const ScopedEnv quad("HYDRAGEN_DECODE_KERNEL", "quad");
    EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(1024, 40, 40, 2048, 64, AttentionMode::hydragen)), 4);
    EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(64, 8, 32, 1024, 1, AttentionMode::hydragen)), 0);
  }
  {
    const ScopedEnv quad1("HYDRAGEN_DECODE_KERNEL", "quad1");
    EXPECT_EQ(cuda::quad_decode_keys(one_segment_plan(1024, 40, 40, 1024, 1, AttentionMode::paged)), 1);
  }
  {
    const ScopedEnv bad("HYDRAGEN_DECODE_KERNEL", "quad8");
    EXPECT_THROW(cuda::quad_decode_keys(one_segment_plan(1024, 40, 40, 16384, 1, AttentionMode::hydragen)), Error);
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// PlanCapacity::holds, the engine's test for a larger runner: every size counts, each alone.
// No GPU needed: host code.
TEST(CudaDispatch, PlanCapacityHoldsEverySize) {
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

// The merge launch follows the decode kernel where a split merge group (several suffix items: a
// split suffix) has two rows or more, with at least kMergeLaunchMinColumnsStacked columns under
// a shared launch; not for one-row groups (B=1, MHA); HYDRAGEN_MERGE_LAUNCH=1 takes it for any
// split, =0 never; any other value is an error naming it. No GPU needed: host code.
TEST(CudaDispatch, MergeLaunchWhereASuffixIsSplit) {
#ifdef HYDRAGEN_WITH_CUDA
  const plan::AttentionPlan unsplit = one_segment_plan(1024, 8, 32, 16384, 1, AttentionMode::hydragen);
  const plan::AttentionPlan split = one_segment_plan(64, 1, 8, 16384, 1, AttentionMode::dense);
  const cuda::SuffixItemSummary unsplit_summary = cuda::SuffixItemSummary::of(unsplit);
  const cuda::SuffixItemSummary split_summary = cuda::SuffixItemSummary::of(split);
  EXPECT_EQ(unsplit_summary.split_rows, 0);
  EXPECT_EQ(split_summary.split_rows, 64 * 8);  // every row of the 64 sequences' split groups
  EXPECT_TRUE(split_summary.split_multi_row);
  // One-row split groups: MHA at B=1 (40 heads, a 16K context split).
  const cuda::SuffixItemSummary one_row = cuda::SuffixItemSummary::of(one_segment_plan(1, 40, 40, 16384, 1, AttentionMode::paged));
  EXPECT_GT(one_row.split_rows, 0);
  EXPECT_FALSE(one_row.split_multi_row);
  // Multi-row split groups under a shared launch, as wide as the rule's floor and one narrower.
  cuda::SuffixItemSummary stacked = split_summary, narrow = split_summary;
  stacked.stacked = narrow.stacked = true;
  stacked.max_columns = cuda::kMergeLaunchMinColumnsStacked;
  narrow.max_columns = cuda::kMergeLaunchMinColumnsStacked - 1;
  {
    const ScopedEnv unset("HYDRAGEN_MERGE_LAUNCH", nullptr);
    EXPECT_FALSE(cuda::merge_launch_rule(unsplit_summary));
    EXPECT_TRUE(cuda::merge_launch_rule(split_summary));
    EXPECT_FALSE(cuda::merge_launch_rule(one_row));
    EXPECT_TRUE(cuda::merge_launch_rule(stacked));
    EXPECT_FALSE(cuda::merge_launch_rule(narrow));
  }
  {
    const ScopedEnv on("HYDRAGEN_MERGE_LAUNCH", "1");
    EXPECT_FALSE(cuda::merge_launch_rule(unsplit_summary));
    EXPECT_TRUE(cuda::merge_launch_rule(split_summary));
    EXPECT_TRUE(cuda::merge_launch_rule(one_row));
    EXPECT_TRUE(cuda::merge_launch_rule(narrow));
  }
  {
    const ScopedEnv off("HYDRAGEN_MERGE_LAUNCH", "0");
    EXPECT_FALSE(cuda::merge_launch_rule(split_summary));
  }
  const ScopedEnv bad("HYDRAGEN_MERGE_LAUNCH", "yes");
  try {
    cuda::merge_launch_rule(split_summary);
    ADD_FAILURE() << "HYDRAGEN_MERGE_LAUNCH=yes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HYDRAGEN_MERGE_LAUNCH=yes"), std::string::npos) << e.what();
  }
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// The suffix kernel choice: the decode kernel for every plan (the pre-v18 rule's mma-kernel
// shapes included: since v18 the choice no longer reads the plan), the mma kernel only when
// HYDRAGEN_SUFFIX_KERNEL=mma forces it. No GPU needed: the choice is host code.
TEST(CudaDispatch, SuffixKernelIsTheDecodeKernelUnlessForced) {
#ifdef HYDRAGEN_WITH_CUDA
  {
    const ScopedEnv unset("HYDRAGEN_SUFFIX_KERNEL", nullptr);
    EXPECT_TRUE(cuda::suffix_runs_decode_kernel());
  }
  {
    const ScopedEnv forced("HYDRAGEN_SUFFIX_KERNEL", "mma");
    EXPECT_FALSE(cuda::suffix_runs_decode_kernel()) << "forced to the mma kernel";
  }
  const ScopedEnv forced("HYDRAGEN_SUFFIX_KERNEL", "decode");
  EXPECT_TRUE(cuda::suffix_runs_decode_kernel());
#else
  GTEST_SKIP() << "built without CUDA";
#endif
}

// The one pass upload's three choices read (SuffixItemSummary), on plans whose counts are
// known, and the decode build choices (narrow, four-row, eight-row, general) with their
// overrides. No GPU needed.
TEST(CudaDispatch, SuffixItemSummaryAndTheNarrowBuild) {
#ifdef HYDRAGEN_WITH_CUDA
  // 40/40 B=64 under a stacked 2K prefix, 64-key suffixes: one-row items, one piece each.
  const plan::AttentionPlan mha = one_segment_plan(64, 40, 40, 2048, 64, AttentionMode::hydragen);
  const cuda::SuffixItemSummary a = cuda::SuffixItemSummary::of(mha);
  EXPECT_EQ(a.items, 64 * 40);
  EXPECT_EQ(a.pieces, 64 * 40);
  EXPECT_EQ(a.keys, 64 * 40 * 64);
  EXPECT_EQ(a.groups, 64 * 40);
  EXPECT_EQ(a.max_rows, 1);
  EXPECT_EQ(a.min_rows, 1);
  EXPECT_TRUE(a.one_row && a.lone_rows);
  EXPECT_TRUE(cuda::decode_runs_narrow(a));
  EXPECT_EQ(cuda::decode_build_rows(a), 1);
  // 32/8 B=64 under a stacked 1K prefix, one-key suffixes, full tiles: 4-row items.
  const cuda::SuffixItemSummary b = cuda::SuffixItemSummary::of(one_segment_plan(64, 8, 32, 1024, 1, AttentionMode::hydragen));
  EXPECT_EQ(b.items, 64 * 8);
  EXPECT_EQ(b.keys, 64 * 8);
  EXPECT_EQ(b.max_rows, 4);
  EXPECT_EQ(b.min_rows, 4);
  EXPECT_FALSE(b.one_row || b.lone_rows);
  EXPECT_FALSE(cuda::decode_runs_narrow(b));
  EXPECT_EQ(cuda::decode_build_rows(b), 4);  // every item 3-4 rows: the four-row build
  // 32/4 (GQA 8): 8-row items, the eight-row build.
  const cuda::SuffixItemSummary g8 = cuda::SuffixItemSummary::of(one_segment_plan(64, 4, 32, 1024, 1, AttentionMode::hydragen));
  EXPECT_EQ(g8.min_rows, 8);
  EXPECT_EQ(cuda::decode_build_rows(g8), 8);
  {
    const ScopedEnv general("HYDRAGEN_DECODE_GENERAL", "1");
    EXPECT_EQ(cuda::decode_build_rows(b), 0);
    EXPECT_EQ(cuda::decode_build_rows(g8), 0);
    EXPECT_EQ(cuda::decode_build_rows(a), 1);  // (one-row plans keep the narrow build)
  }
  // Mixed widths and two-row items: the general build. (Counts set by hand: the summary's
  // fields are what the choice reads.)
  auto rows_between = [](int min_rows, int max_rows) {
    cuda::SuffixItemSummary s;
    s.items = s.groups = s.pieces = 10;
    s.min_rows = min_rows, s.max_rows = max_rows, s.one_row = s.lone_rows = false;
    return s;
  };
  EXPECT_EQ(cuda::decode_build_rows(rows_between(4, 8)), 0);
  EXPECT_EQ(cuda::decode_build_rows(rows_between(2, 4)), 0);
  EXPECT_EQ(cuda::decode_build_rows(rows_between(2, 2)), 0);
  EXPECT_EQ(cuda::decode_build_rows(rows_between(3, 3)), 4);
  EXPECT_EQ(cuda::decode_build_rows(rows_between(5, 7)), 8);
  EXPECT_EQ(cuda::decode_build_rows(cuda::SuffixItemSummary{}), 1);  // no items: one row each, vacuously
  // A split suffix: one-row items, not alone in their merge groups.
  const cuda::SuffixItemSummary c = cuda::SuffixItemSummary::of(one_segment_plan(1, 40, 40, 32768, 1, AttentionMode::paged));
  EXPECT_TRUE(c.one_row);
  EXPECT_FALSE(c.lone_rows);
  EXPECT_GT(c.items, c.groups);
  EXPECT_EQ(c.keys, 40 * (32768 + 1));
  {
    const ScopedEnv wide("HYDRAGEN_DECODE_WIDE", "1");
    EXPECT_FALSE(cuda::decode_runs_narrow(a));
  }
  const ScopedEnv narrow("HYDRAGEN_DECODE_NARROW", "1");
  EXPECT_FALSE(cuda::decode_runs_narrow(b));  // (it has no wider path)
  // 40/40 B=1024 over 1K contexts, paged: 40960 items of 17 pieces, the wide build unless forced.
  const cuda::SuffixItemSummary d = cuda::SuffixItemSummary::of(one_segment_plan(1024, 40, 40, 1024, 1, AttentionMode::paged));
  EXPECT_TRUE(cuda::decode_runs_narrow(d));
  {
    const ScopedEnv unforced("HYDRAGEN_DECODE_NARROW", nullptr);
    EXPECT_FALSE(cuda::decode_runs_narrow(d));
  }
#else
  GTEST_SKIP() << "built without CUDA";
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
  const SharingTree host_tree = random_tree(shape, DType::bf16, rng);
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
    EXPECT_LE(relative_norm_error(out.o.to(Device::cpu), ref.o), 5e-3) << what;
    expect_lse_near(out.lse.to(Device::cpu), ref.lse, what);
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
  const SharingTree tree = random_tree(shape, DType::bf16, rng);
  const Tensor q = testing::random_tensor({tree.query_rows(), 8, 80}, DType::bf16, rng).to(Device::cuda);
  try {
    tree_attention(tree, q);
    FAIL() << "head_dim 80 should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 80"), std::string::npos) << e.what();
  }
#endif
}

// v28: the TMA shared kernel as the programmatic dependent of the RoPE launch that writes q
// (PagedAttentionArgs::q_from_previous_launch), eagerly and in a captured graph. q starts as
// NaN and RoPE (position 0: no rotation, so q is the q part of qkv) fills it; a shared kernel
// that read q before RoPE's end would put NaN or stale values into the output. One root
// segment read by 48-300 sequences (mostly full 128-row tiles: the TMA kernel runs; with two
// levels the children's tiles may not be), stacked, a second call with another q on the same
// buffers, against the float64 reference.
TEST(CudaAttention, SharedLaunchOverlapsTheLaunchThatWritesQ) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (int trial = 0; trial < 6; ++trial) {
    const bool graph = trial % 2 == 1;
    testing::PagedShape shape;
    shape.page_size = 64;
    shape.head_dim = 128;
    shape.groups = rng.pick(std::vector<int>{4, 8});
    shape.kv_heads = rng.uniform_int(1, 2);
    shape.depth = 1;
    shape.batch = rng.pick(std::vector<int>{48, 128, 300});
    shape.segment_lengths = {700, 1500, 2100};
    shape.round_to_bf16 = true;
    const testing::PagedCase c = testing::random_paged_case(shape, rng);
    plan::PlanOptions options = cuda::plan_options_for_device(DType::bf16, 128, AttentionMode::hydragen, true);
    options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    ASSERT_TRUE(plan.shared_full_tiles && !plan.shared_items.empty()) << "trial " << trial;
    const std::int64_t rows = c.q.size(0), hq = c.q.size(1), hkv = c.layout.kv_heads, d = 128;
    cuda::PagedAttentionRunner runner(DType::bf16, static_cast<int>(d), static_cast<int>(hq), static_cast<int>(hkv),
                                      cuda::PlanCapacity::of(plan), options.shared_tile_rows);
    runner.upload(plan);
    EXPECT_TRUE(runner.launch_variant() & 4) << "the TMA shared kernel";
    const Tensor k = c.k_pool.to(DType::bf16).to(Device::cuda), v = c.v_pool.to(DType::bf16).to(Device::cuda);
    // RoPE's own K/V go to scratch caches (no stacked segment's slots), one slot per row.
    Tensor k_scratch = Tensor::zeros({rows, hkv, d}, DType::bf16, Device::cuda), v_scratch = k_scratch.clone();
    Tensor positions = Tensor::zeros({rows}, DType::i32, Device::cuda);
    std::vector<std::int32_t> slot_ids(static_cast<std::size_t>(rows));
    for (std::int64_t r = 0; r < rows; ++r) slot_ids[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(r);
    Tensor slots = Tensor::empty({rows}, DType::i32, Device::cuda);
    slots.copy_from(Tensor::wrap(slot_ids.data(), {rows}, DType::i32));
    Tensor inv_freq = Tensor::zeros({d / 2}, DType::f32, Device::cuda);
    Tensor q = Tensor::empty({rows, hq, d}, DType::bf16, Device::cuda);
    Tensor out = Tensor::empty({rows, hq, d}, DType::bf16, Device::cuda);
    Tensor out_lse = Tensor::empty({rows, hq}, DType::f32, Device::cuda);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    cuda::PagedAttentionArgs args;
    args.q = q.raw(), args.k_pool = k.raw(), args.v_pool = v.raw(), args.out = out.raw();
    args.out_lse = out_lse.data<float>(), args.page_size = c.layout.page_size;
    args.q_from_previous_launch = true;
    Tensor qkv = Tensor::empty({rows, (hq + 2 * hkv) * d}, DType::bf16, Device::cuda);
    auto enqueue = [&] {
      cuda::rope_append_kv(qkv, hq, hkv, positions, inv_freq, slots, k_scratch, v_scratch, &q, stream);
      runner.run(args, stream);
    };
    cudaGraphExec_t exec = nullptr;
    if (graph) {
      cudaGraph_t g;
      ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
      enqueue();
      ASSERT_EQ(cudaStreamEndCapture(stream, &g), cudaSuccess);
      ASSERT_EQ(cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
      cudaGraphDestroy(g);
    }
    for (int call = 0; call < 2; ++call) {
      // q heads of qkv: fresh random q (bf16 values); its k and v heads random too.
      const Tensor qi = testing::random_tensor({rows, hq, d}, DType::bf16, rng);
      Tensor qkv_host = testing::random_tensor({rows, (hq + 2 * hkv) * d}, DType::bf16, rng).to(Device::cpu);
      const Tensor qi_host = qi.to(Device::cpu);
      for (std::int64_t r = 0; r < rows; ++r)
        std::memcpy(static_cast<unsigned char*>(qkv_host.raw()) + r * (hq + 2 * hkv) * d * 2,
                    static_cast<const unsigned char*>(qi_host.raw()) + r * hq * d * 2, static_cast<std::size_t>(hq * d * 2));
      qkv.copy_from(qkv_host);
      runner.poison_states();
      ASSERT_EQ(cudaMemset(q.raw(), 0xff, q.bytes()), cudaSuccess);
      ASSERT_EQ(cudaMemset(out.raw(), 0xff, out.bytes()), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      if (graph) ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      else enqueue();
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      const AttentionState ref = reference_tree_attention(c.tree, qi.to(DType::f32));
      const Tensor o = out.to(Device::cpu).to(DType::f32);
      EXPECT_LE(relative_norm_error(o, ref.o), 5e-3)
          << "trial " << trial << (graph ? " graph" : " eager") << " call " << call << " G " << shape.groups << " Hkv "
          << hkv << " batch " << shape.batch;
    }
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    cudaStreamDestroy(stream);
  }
#endif
}

// Capture one step in a CUDA graph, then change the tree (and so the plan) and replay: the
// graph reads the new plan from the same device buffers, uploaded synchronously, then
// asynchronously on the replay's stream, then prepared (packed on the host) while the replay
// before it runs and uploaded from there, as the engine does; last with split suffixes, so the
// graph holds the merge launch after the decode kernel.
TEST(CudaAttention, GraphReplayFollowsTheUploadedPlan) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  Rng rng;
  SCOPED_TRACE(rng.trace());
  testing::PagedShape shape;
  shape.groups = 8, shape.head_dim = 128, shape.depth = 2, shape.fanout = 4, shape.batch = 24;
  shape.segment_lengths = {0, 1, 7, 65, 130, 513};
  shape.max_query_tokens = 2;
  shape.round_to_bf16 = true;
  const std::int64_t hq = 8, d = 128, page = shape.page_size;
  const testing::PagedCase cases[2] = {testing::random_paged_case(shape, rng), testing::random_paged_case(shape, rng)};
  const SharingTree trees[2] = {cases[0].tree, cases[1].tree};
  const plan::PlanOptions plan_options = cuda::plan_options_for_device(DType::bf16, d, AttentionMode::hydragen, true);
  Tensor k_images[2], v_images[2];  // the pools in bf16 on the host
  plan::AttentionPlan plans[2], split_plans[2];
  plan::PlanOptions split_options = plan_options;
  split_options.suffix_min_split_tokens = 16;
  split_options.suffix_tile_rows = plan::kSuffixTileRows;
  std::int64_t pool_elems = 8, rows = 1;
  for (int i = 0; i < 2; ++i) {
    k_images[i] = cases[i].k_pool.to(DType::bf16), v_images[i] = cases[i].v_pool.to(DType::bf16);
    plans[i] = plan::build_attention_plan(cases[i].layout, plan_options);
    split_plans[i] = plan::build_attention_plan(cases[i].layout, split_options);
    ASSERT_GT(cuda::SuffixItemSummary::of(split_plans[i]).split_rows, 0) << "tree " << i;
    pool_elems = std::max<std::int64_t>(pool_elems, k_images[i].numel());
    rows = std::max(rows, trees[i].query_rows());
  }
  Tensor k_pool = Tensor::empty({pool_elems}, DType::bf16, Device::cuda);
  Tensor v_pool = Tensor::empty({pool_elems}, DType::bf16, Device::cuda);
  Tensor q = Tensor::empty({rows, hq, d}, DType::bf16, Device::cuda);
  Tensor out = Tensor::empty({rows, hq, d}, DType::bf16, Device::cuda);
  Tensor out_lse = Tensor::empty({rows, hq}, DType::f32, Device::cuda);
  cuda::PagedAttentionArgs args;
  args.q = q.raw(), args.k_pool = k_pool.raw(), args.v_pool = v_pool.raw(), args.out = out.raw();
  args.out_lse = out_lse.data<float>(), args.page_size = page;

  // Synchronous uploads; then uploads on a non-blocking stream that the replay sees only
  // through that stream's order, twice over the same pinned staging; then plans prepared while
  // the replay before runs (config 3); then
  // synchronous uploads with the suffix launch a programmatic dependent of the shared launch
  // (HYDRAGEN_PDL=1: a programmatic edge in the captured graph).
  for (const int config : {0, 1, 2, 3, 4}) {
    const bool async = config == 1 || config == 3;
    const ScopedEnv pdl_env("HYDRAGEN_PDL", config == 2 ? "1" : nullptr);
    const ScopedEnv merge_env("HYDRAGEN_MERGE_LAUNCH", config == 4 ? "1" : nullptr);
    const plan::AttentionPlan* step_plans = config == 4 ? split_plans : plans;
    cuda::PagedAttentionRunner runner(DType::bf16, d, hq, 1,
                                      cuda::PlanCapacity::of(step_plans[0]).max(cuda::PlanCapacity::of(step_plans[1])),
                                      plan_options.shared_tile_rows);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    runner.upload(step_plans[0]);
    if (config == 4) EXPECT_NE(runner.launch_variant() & 256, 0);  // the merge launch is captured
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    runner.run(args, stream);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int round = 0; round < 2; ++round)
      for (int i = 0; i < 2; ++i) {
        const Tensor qi = testing::random_tensor({trees[i].query_rows(), hq, d}, DType::bf16, rng);
        ASSERT_EQ(cudaMemcpy(q.raw(), qi.raw(), qi.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(k_pool.raw(), k_images[i].raw(), k_images[i].bytes(), cudaMemcpyHostToDevice), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(v_pool.raw(), v_images[i].raw(), v_images[i].bytes(), cudaMemcpyHostToDevice), cudaSuccess);
        runner.poison_states();
        ASSERT_EQ(cudaMemset(out.raw(), 0xff, out.bytes()), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        if (config == 3 && runner.has_prepared()) runner.upload_prepared(stream);
        else runner.upload(step_plans[i], async ? stream : nullptr);
        EXPECT_FALSE(runner.has_prepared());
        ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
        if (config == 3) runner.prepare(plans[1 - i]);  // the next replay's plan, packed under this one
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        const AttentionState ref = reference_tree_attention(trees[i], qi);
        const Tensor o = out.slice(0, 0, trees[i].query_rows()).to(Device::cpu).to(DType::f32);
        EXPECT_LE(relative_norm_error(o, ref.o), 5e-3)
            << (config == 4 ? "split" : config == 3 ? "prepared" : async ? "async" : config == 2 ? "pdl" : "sync")
            << " replay " << round << "."
            << i;
      }
    if (config == 3) {
      runner.upload_prepared(stream);
      EXPECT_THROW(runner.upload_prepared(stream), Error);  // nothing prepared since
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
#endif
}

}  // namespace
}  // namespace hydragen
