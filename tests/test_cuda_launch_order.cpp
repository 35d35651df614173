// The CUDA attention step's launch order: the shared launch as the programmatic dependent of
// the RoPE launch that writes q, and a step captured in a CUDA graph that replays whatever plan
// was uploaded since (synchronously, on the stream, prepared under the replay before), with
// programmatic edges and the merge launch in the graph. Against the float64 reference; skipped
// without a CUDA device.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <cstring>

#include "attention_test_util.h"
#include "cuda_attention_test_util.h"
#include "hydragen/attention.h"
#include "hydragen/error.h"
#include "paged_test_util.h"
#ifdef HYDRAGEN_WITH_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_attention.h"
#include "backend/cuda/model_ops.h"
#include "backend/cuda/paged_attention_runner.h"
#endif

namespace hydragen {
namespace {

using testing::Rng;
using testing::TreeShape;

// The TMA shared kernel as the programmatic dependent of the RoPE launch that writes q
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
                                      cuda::PlanCapacity::of(plan));
    runner.upload(plan);
    EXPECT_EQ(runner.launch_choice().shared, cuda::SharedKernel::warp_specialized) << "the TMA shared kernel";
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
      EXPECT_LE(testing::relative_norm_error(o, ref.o), 5e-3)
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
    ASSERT_GT(cuda::PlanSummary::of(split_plans[i]).split_rows, 0) << "tree " << i;
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
  // (forced: a programmatic edge in the captured graph); last the merge launch forced.
  for (const int config : {0, 1, 2, 3, 4}) {
    const bool async = config == 1 || config == 3;
    cuda::KernelOverrides overrides;
    if (config == 2) overrides.pdl = cuda::Force::on;
    if (config == 4) overrides.merge_launch = cuda::Force::on;
    const plan::AttentionPlan* step_plans = config == 4 ? split_plans : plans;
    cuda::PagedAttentionRunner runner(DType::bf16, d, hq, 1,
                                      cuda::PlanCapacity::of(step_plans[0]).max(cuda::PlanCapacity::of(step_plans[1])),
                                      overrides);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    runner.upload(step_plans[0]);
    if (config == 4) EXPECT_TRUE(runner.launch_choice().merge_launch);  // the merge launch is captured
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
        EXPECT_LE(testing::relative_norm_error(o, ref.o), 5e-3)
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
