// The attention state (o, lse) on the device, and its merge. Every kernel uses this header.
//
// A state of a query row over a key set K is o = sum_j p_j v_j / sum_j p_j and
// lse = log sum_j exp(s_j), s_j the scaled score. The merge of states i over disjoint key sets:
//   m = max_i lse_i,  w_i = exp(lse_i - m),  o = sum_i w_i o_i / sum_i w_i,  lse = m + log sum_i w_i.
// An empty set is (0, -inf); when every lse is -inf the merge is (0, -inf), never NaN.
#pragma once

#include <cmath>
#include <cstdint>

namespace hydragen::cuda {

// Partial states live in one fp32 buffer: entry e holds o[e * D .. e * D + D) and lse[e].
struct StateBuffer {
  float* o;
  float* lse;
};

// Merges the n partial states first, first + stride, ... of one row, for the four o
// elements [d, d + 4); returns the merged lse. Reads through L2: other blocks wrote them.
// Columns go in batches of kMergeBatch with every load of a batch issued before any is used
// (a split 32K prefix has 33+ columns: one at a time, each is a chain of dependent L2 round
// trips). Same arithmetic in column order as one at a time; an entry whose weight is 0 is
// loaded but never used (it may be unwritten).
constexpr int kMergeBatch = 8;
__device__ __forceinline__ float merge_states_chunk(StateBuffer states, int head_dim, std::int64_t first,
                                                    std::int64_t stride, int n, int d, float4* o) {
  float m = -INFINITY;
  for (int c0 = 0; c0 < n; c0 += kMergeBatch) {
    float l[kMergeBatch];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) l[j] = c0 + j < n ? __ldcg(states.lse + first + (c0 + j) * stride) : -INFINITY;
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) m = fmaxf(m, l[j]);
  }
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (m == -INFINITY) {
    *o = acc;
    return -INFINITY;
  }
  float sum = 0.f;
  for (int c0 = 0; c0 < n; c0 += kMergeBatch) {
    float l[kMergeBatch];
    float4 x[kMergeBatch];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      const std::int64_t e = first + (c0 + j) * stride;
      l[j] = -INFINITY, x[j] = make_float4(0.f, 0.f, 0.f, 0.f);
      if (c0 + j < n) {
        l[j] = __ldcg(states.lse + e);
        x[j] = __ldcg(reinterpret_cast<const float4*>(states.o + e * head_dim + d));
      }
    }
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      const float w = __expf(l[j] - m);
      if (w == 0.f) continue;  // an empty or negligible state; its o may be anything
      sum += w;
      acc.x += w * x[j].x;
      acc.y += w * x[j].y;
      acc.z += w * x[j].z;
      acc.w += w * x[j].w;
    }
  }
  const float inv = 1.f / sum;
  *o = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
  return m + __logf(sum);
}

// One thread of each block (or warp) that wrote partial states of a merge group calls this
// after a barrier has ordered its peers' writes before it. The fence releases those writes
// and the atomic counts the arrival; the last of `items` arrivals acquires everyone's writes
// (the second fence) and resets the counter for the next launch, so no host reset is needed
// between graph replays. Returns true for the last arrival, which then merges the group.
__device__ __forceinline__ bool take_merge_ticket(int* arrivals, int items) {
  asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  const bool last = atomicAdd(arrivals, 1) == items - 1;
  if (last) {
    *arrivals = 0;
    asm volatile("fence.acq_rel.gpu;\n" ::: "memory");
  }
  return last;
}

}  // namespace hydragen::cuda
