// The merge launch after the decode kernel (split_merge_kernel) and its entries: bf16 and
// fp16, head dims 64, 96 and 128.
#include "backend/cuda/kernel_table.h"

#include <cstdint>
#include <type_traits>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_params.cuh"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/mma.cuh"

namespace hydragen::cuda {

// The merge launch: the decode kernel's split merge groups (PlanMergeGroup::items > 1), merged
// after it by a launch of their own instead of by each group's last arrival, which merges all
// of its group's rows on one warp (see perf-notes: v39b). Every row of a split group
// (AttentionPlan::merge_rows) is a warp's: a persistent grid of warps takes rows w, w + warps,
// ...; a row's lse in one round trip (lane c holds column c), then its columns' o, kBatch in
// flight per lane (one round trip up to kBatch columns). Runs as the decode launch's programmatic dependent where the device has PDL (the
// decode kernel lets it start once every decode block runs): the plan loads go before the
// wait, the state loads after it.
template <class Vec>
__device__ __forceinline__ Vec load_vec(const Vec* at) {
  if constexpr (std::is_same_v<Vec, float3>) {
    const float* f = reinterpret_cast<const float*>(at);
    return make_float3(__ldcg(f), __ldcg(f + 1), __ldcg(f + 2));
  } else {
    return __ldcg(at);
  }
}

template <class T, int D>
__global__ void __launch_bounds__(32 * kSplitMergeWarps, kSplitMergeBlocksPerSm) split_merge_kernel(const PagedAttentionParams p) {
  constexpr int DL = D / 32;  // dims per lane
  constexpr int kBatch = 16;
  // A lane's dims of a state row: one 16- or 8-byte load (D 128, 64), or three 4-byte ones (D 96).
  using Vec = std::conditional_t<DL == 4, float4, std::conditional_t<DL == 3, float3, float2>>;
  const int lane = threadIdx.x % 32;
  const int count = *p.merge_row_count, warps = gridDim.x * kSplitMergeWarps;
  const int group_size = p.q_heads / p.kv_heads;
  bool waited = false;
  for (int u = blockIdx.x * kSplitMergeWarps + threadIdx.x / 32; u < count; u += warps) {
    const plan::PlanMergeRow mr = p.merge_rows[u];
    const plan::PlanItem it = p.items[mr.item];
    const plan::PlanRow row = p.rows[it.row_begin + mr.row];
    const int n = p.groups[it.group].columns;
    if (!waited) wait_for_shared_launch(), waited = true;  // (the decode launch's states: this launch is its dependent)
    const int head = it.kv_head * group_size + row.group;
    const std::int64_t first = std::int64_t{row.state_base} + head;
    auto entry = [&](int c) { return first + std::int64_t{c} * row.state_stride; };
    // Lane c holds column c's lse (and c + 32's, ... past 32 columns: loaded again below).
    const float lse0 = lane < n ? __ldcg(p.states.lse + entry(lane)) : -INFINITY;
    float mx = lse0;
    for (int c = lane + 32; c < n; c += 32) mx = fmaxf(mx, __ldcg(p.states.lse + entry(c)));
#pragma unroll
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float acc[DL] = {}, sum = 0.f;
    if (mx != -INFINITY) {
      for (int c0 = 0; c0 < n; c0 += 32) {
        const float l = c0 == 0 ? lse0 : c0 + lane < n ? __ldcg(p.states.lse + entry(c0 + lane)) : -INFINITY;
        const float w_lane = __expf(l - mx);  // 0 at -inf: an empty or negligible state
        sum += w_lane;
        const int m = min(32, n - c0);
        for (int j0 = 0; j0 < m; j0 += kBatch) {
          float w[kBatch];
          Vec x[kBatch];
#pragma unroll
          for (int j = 0; j < kBatch; ++j) {
            w[j] = __shfl_sync(0xffffffffu, w_lane, (j0 + j) & 31);
            if (j0 + j >= m) w[j] = 0.f;
            x[j] = Vec{};
            if (w[j] != 0.f)  // a zero weight's entry may be unwritten: never loaded
              x[j] = load_vec(reinterpret_cast<const Vec*>(p.states.o + entry(c0 + j0 + j) * D) + lane);
          }
#pragma unroll
          for (int j = 0; j < kBatch; ++j) {
            const float* v = reinterpret_cast<const float*>(&x[j]);
#pragma unroll
            for (int i = 0; i < DL; ++i) acc[i] += w[j] * v[i];
          }
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      const float rs = 1.f / sum;
#pragma unroll
      for (int i = 0; i < DL; ++i) acc[i] *= rs;
    }
    const std::int64_t qi = std::int64_t{row.token} * p.q_heads + head;
    T* out = static_cast<T*>(p.out) + qi * D + lane * DL;
#pragma unroll
    for (int i = 0; i < DL; ++i) out[i] = ptx::from_float<T>(acc[i]);
    if (lane == 0) p.out_lse[qi] = mx == -INFINITY ? -INFINITY : mx + __logf(sum);
  }
}

namespace {

template <class T, int D>
void launch(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool dependent) {
  launch_kernel(split_merge_kernel<T, D>, grid, 32 * kSplitMergeWarps, 0, stream, dependent, p);
}

}  // namespace

KernelEntry split_merge_entry(DType dtype, int head_dim) {
  return for_head_dim(dtype, head_dim, [](auto t, auto d) {
    return KernelEntry{launch<typename decltype(t)::type, decltype(d)::value>, kSplitMergeBlocksPerSm};
  });
}

}  // namespace hydragen::cuda
