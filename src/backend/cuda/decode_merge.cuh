// The decode kernel's merge of a multi-row group by its last-arriving item
// (decode_attention.cuh): every row's partial states, one warp, the state loads batched.
#pragma once

#include <cstdint>

#include "attn/paged_plan.h"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/paged_attention.cuh"

namespace hydragen::cuda {

// The last arrival's merge of its group's rows (<= 8) over n state columns: the arithmetic of
// merge_states_chunk (weights exp(lse - max), their sum and the weighted o in column order),
// with the loads reordered for latency. merge_states_chunk per (row, 4 dims) made each lane walk
// its rows one after another, every row two passes of dependent L2 round trips (8 rows x 17
// columns: ~48 round trips; 8/1 B=256 32K s1 spent 0.07 ms in the suffix launch). Here: every
// lse at once (one round trip), each row's weights into shared memory by lane r, then each
// lane's two (row, 4 dims) chunks with kMergeBatch o loads of each in flight. `scratch` is the
// warp's K/V staging area (free after the key loop); returns false, having done nothing, when
// the weights do not fit it (the caller merges with merge_states_chunk).
template <class T, int D>
__device__ __forceinline__ bool merge_rows_in_warp(const PagedAttentionParams& p, const attn::PlanItem& it, int rows,
                                                   int n, const attn::PlanRow& my_row, float* scratch,
                                                   int scratch_floats, int lane) {
  constexpr int kHeader = 56;  // base [8] int64, qi [8] int64, stride [8], lse [8], inv [8]
  if (kHeader + rows * n > scratch_floats) return false;  // warp-uniform
  auto* s_base = reinterpret_cast<std::int64_t*>(scratch);    // entry of (row, column 0)
  auto* s_qi = reinterpret_cast<std::int64_t*>(scratch + 16);  // output row (token * Hq + head)
  int* s_stride = reinterpret_cast<int*>(scratch + 32);
  float* s_lse = scratch + 40;
  float* s_inv = scratch + 48;
  float* w = scratch + kHeader;  // [rows][n]: lse, then weights
  const int group_size = p.q_heads / p.kv_heads;
  if (lane < rows) {
    const int head = it.kv_head * group_size + my_row.group;
    s_base[lane] = std::int64_t{my_row.state_base} + head;
    s_qi[lane] = std::int64_t{my_row.token} * p.q_heads + head;
    s_stride[lane] = my_row.state_stride;
  }
  __syncwarp();
  const int pairs = rows * n;
  for (int q0 = 0; q0 < pairs; q0 += 32 * kMergeBatch) {
    float v[kMergeBatch];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      const int q = q0 + j * 32 + lane, r = q / n;
      v[j] = q < pairs ? __ldcg(p.states.lse + s_base[r] + std::int64_t{q - r * n} * s_stride[r]) : -INFINITY;
    }
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j)
      if (q0 + j * 32 + lane < pairs) w[q0 + j * 32 + lane] = v[j];
  }
  __syncwarp();
  if (lane < rows) {
    float* wr = w + lane * n;
    float m = -INFINITY;
    for (int c = 0; c < n; ++c) m = fmaxf(m, wr[c]);
    float sum = 0.f;
    for (int c = 0; c < n; ++c) {
      const float x = m == -INFINITY ? 0.f : __expf(wr[c] - m);  // 0: an empty or negligible state
      wr[c] = x;
      sum += x;
    }
    s_lse[lane] = m == -INFINITY ? -INFINITY : m + __logf(sum);
    s_inv[lane] = m == -INFINITY ? 0.f : 1.f / sum;
  }
  __syncwarp();
  constexpr int kChunks = D / 4;  // 4-dim chunks of a row
  const int ids = rows * kChunks;
  for (int id0 = lane; id0 < ids; id0 += 64) {
    int r[2], d[2];
    bool on[2];
    float4 acc[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int id = id0 + 32 * u;
      on[u] = id < ids, r[u] = on[u] ? id / kChunks : 0, d[u] = (id % kChunks) * 4;
      acc[u] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    for (int c0 = 0; c0 < n; c0 += kMergeBatch) {
      float ww[2][kMergeBatch];
      float4 x[2][kMergeBatch];
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int j = 0; j < kMergeBatch; ++j) {
          const int c = c0 + j;
          ww[u][j] = on[u] && c < n ? w[r[u] * n + c] : 0.f;
          x[u][j] = make_float4(0.f, 0.f, 0.f, 0.f);
          if (ww[u][j] != 0.f)  // a zero weight's entry may be unwritten: never loaded
            x[u][j] = __ldcg(reinterpret_cast<const float4*>(p.states.o + (s_base[r[u]] + std::int64_t{c} * s_stride[r[u]]) * D + d[u]));
        }
#pragma unroll
      for (int u = 0; u < 2; ++u)
#pragma unroll
        for (int j = 0; j < kMergeBatch; ++j) {
          const float wt = ww[u][j];
          if (wt == 0.f) continue;
          acc[u].x += wt * x[u][j].x;
          acc[u].y += wt * x[u][j].y;
          acc[u].z += wt * x[u][j].z;
          acc[u].w += wt * x[u][j].w;
        }
    }
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (!on[u]) continue;
      const float inv = s_inv[r[u]];
      T* out = static_cast<T*>(p.out) + s_qi[r[u]] * D + d[u];
      out[0] = ptx::from_float<T>(acc[u].x * inv), out[1] = ptx::from_float<T>(acc[u].y * inv);
      out[2] = ptx::from_float<T>(acc[u].z * inv), out[3] = ptx::from_float<T>(acc[u].w * inv);
      if (d[u] == 0) p.out_lse[s_qi[r[u]]] = s_lse[r[u]];
    }
  }
  return true;
}

}  // namespace hydragen::cuda
