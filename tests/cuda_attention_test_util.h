// What the CUDA attention tests share: random trees, the one error metric (relative norm of o,
// no NaN) and the lse check, the float64 reference through tree_attention, and a plan run
// on the device by PagedAttentionRunner with outputs poisoned first.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "hydragen/attention.h"
#include "paged_test_util.h"
#ifdef HYDRAGEN_WITH_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/paged_attention_runner.h"
#endif

namespace hydragen::testing {

struct TreeShape {
  int hkv = 1, groups = 8, head_dim = 128;
  int depth = 1, fanout = 4, batch = 8;
  std::vector<std::int64_t> segment_lengths = {0, 1, 7, 65, 130, 513};
  std::vector<std::int64_t> suffix_lengths = {0, 1, 9, 64, 100};
  int max_query_tokens = 1;
};

// A random tree: `depth` levels of segments (each node `fanout` children at most), then
// `batch` sequences hung under random deepest nodes; K/V in dtype.
inline SharingTree random_tree(const TreeShape& shape, DType dtype, Rng& rng) {
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
inline double relative_norm_error(const Tensor& out, const Tensor& ref) {
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    const double a = out.get(i), b = ref.get(i);
    if (std::isnan(a)) return INFINITY;
    num += (a - b) * (a - b);
    den += b * b;
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline void expect_lse_near(const Tensor& out, const Tensor& ref, const std::string& what) {
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
inline void check_against_reference(const TreeShape& shape, DType dtype, AttentionMode mode, int page_size, Rng& rng,
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
// Runs `plan` with PagedAttentionRunner (under `overrides`) over the case's pool and q in bf16
// on the device; outputs start as NaN. Returns o (widened to f32) and lse on the CPU, and
// where asked the runner's launch choice for the plan.
inline AttentionState run_on_device(const PagedCase& c, const plan::AttentionPlan& plan,
                                    const cuda::KernelOverrides& overrides = {}, cuda::LaunchChoice* choice = nullptr) {
  const std::int64_t rows = c.q.size(0), hq = c.q.size(1), d = c.q.size(2);
  cuda::PagedAttentionRunner runner(DType::bf16, static_cast<int>(d), static_cast<int>(hq), c.layout.kv_heads,
                                    cuda::PlanCapacity::of(plan), overrides);
  runner.upload(plan);
  if (choice != nullptr) *choice = runner.launch_choice();
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

// A case run on the device against the float64 reference of its tree.
inline void expect_matches_reference(const PagedCase& c, const plan::AttentionPlan& plan,
                                     const cuda::KernelOverrides& overrides, const std::string& what,
                                     cuda::LaunchChoice* choice = nullptr) {
  const AttentionState out = run_on_device(c, plan, overrides, choice);
  const AttentionState ref = reference_tree_attention(c.tree, c.q);
  EXPECT_LE(relative_norm_error(out.o, ref.o), 5e-3) << what;
  expect_lse_near(out.lse, ref.lse, what);
}
#endif

}  // namespace hydragen::testing
