// The decode kernel's merges (decode_attention.cuh), one warp each: a one-row group of <= 32
// columns in registers, the lone multi-row item's merge in line, and a multi-row group by its
// last-arriving item, the state loads batched. (Split groups may instead be merged by the
// merge launch after the decode kernel: split_merge.cu.)
#pragma once

#include <cstdint>
#include <type_traits>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/attention_params.cuh"
#include "backend/cuda/paged_attention_runner.h"  // kInLinePairs

namespace hydragen::cuda {

// Starts the copy of one partial state's o (D floats at src) into dst (D floats of the warp's
// shared memory), 16 bytes per lane; zeros where !load (nothing is read: a zero weight's entry
// may be unwritten; `safe` stands in for src, any readable address). A merge starts every copy
// it needs, then waits once (stage_wait): all in flight together. Loaded into registers under
// `if (w != 0)`, or as predicated or unconditional loads, ptxas issues them one after another,
// each copied out of the same registers before the next (see perf-notes: v29).
template <int D>
__device__ __forceinline__ void stage_state_o(bool load, const float* src, const float* safe, float* dst, int lane) {
  if (lane < D / 4) ptx::cp_async_16(dst + lane * 4, load ? src + lane * 4 : safe, load);
}
// The staged copies have landed and every lane sees every lane's.
__device__ __forceinline__ void stage_wait() {
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncwarp();
}

// One row's merge over n <= 32 columns (entries head_entry + c * stride), written to output row
// qi: lane c holds column c's lse (-inf past n and at `own`). own >= 0: that column is the
// calling warp's state, in registers (own_o: its lane's D / 32 dims, normalised; own_lse),
// never read from the buffer; own < 0: every column is read. The weights exp(lse - max) and
// their sum come from shuffles; the other columns' o follow, eight at a time through `stage`
// (8 * D floats of the warp's shared memory, stage_state_o), a zero weight's never read (it
// may be unwritten). The arithmetic is merge_states_chunk's, summed in another order. Every
// lane calls it.
template <class T, int D>
__device__ __forceinline__ void merge_row_in_registers(const PagedAttentionParams& p, std::int64_t head_entry, int stride,
                                                       std::int64_t qi, int n, int own, const float (&own_o)[D / 32],
                                                       float own_lse, float lane_lse, float* stage, int lane) {
  constexpr int DL = D / 32;
  constexpr int kBatch = 8;
  const float own_l = own >= 0 ? own_lse : -INFINITY;
  float mx = fmaxf(lane_lse, own_l);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float acc[DL] = {};
  float out_lse = -INFINITY;
  if (mx != -INFINITY) {
    const float w_lane = __expf(lane_lse - mx);  // 0 at -inf
    float sum = w_lane;
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float w_own = __expf(own_l - mx);
    sum += w_own;
    if (w_own != 0.f) {
#pragma unroll
      for (int i = 0; i < DL; ++i) acc[i] = w_own * own_o[i];
    }
    const float* column0 = p.states.o + head_entry * D;
#pragma unroll 1
    for (int c0 = 0; c0 < n; c0 += kBatch) {
      float w[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        w[j] = __shfl_sync(0xffffffffu, w_lane, (c0 + j) & 31);
        if (c0 + j >= n) w[j] = 0.f;
        stage_state_o<D>(w[j] != 0.f, column0 + std::int64_t{c0 + j} * stride * D, p.states.o, stage + j * D, lane);
      }
      stage_wait();
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
#pragma unroll
        for (int i = 0; i < DL; ++i) acc[i] += w[j] * stage[j * D + lane * DL + i];
      __syncwarp();  // (the next batch rewrites the stage)
    }
    const float rs = 1.f / sum;
#pragma unroll
    for (int i = 0; i < DL; ++i) acc[i] *= rs;
    out_lse = mx + __logf(sum);
  }
  T* out = static_cast<T*>(p.out) + qi * D + lane * DL;
#pragma unroll
  for (int i = 0; i < DL; ++i) out[i] = ptx::from_float<T>(acc[i]);
  if (lane == 0) p.out_lse[qi] = out_lse;
}

// The only suffix item of its group, R >= 4 rows (rows of them) over n columns with
// rows * (n - 1) <= kInLinePairs (see perf-notes: v26): its own state stays in registers (own_o[r]: this lane's
// D / 32 dims of row r, normalised; own_lse[r]) and is never written; lane r * (n - 1) + j holds
// the lse of row r's j-th other column (lane_lse, fetched under the item's keys); every other
// column's o is copied at once into `stage` (kInLinePairs * D floats of the warp's shared
// memory, stage_state_o; a zero weight's never read: it may be unwritten), then each row merges
// as merge_states_chunk does (weights exp(lse - max), their sum, the weighted o) and writes its
// output. One round trip after the keys where the ticket path took four.
template <class T, int D, int R>
__device__ __forceinline__ void merge_rows_in_line(const PagedAttentionParams& p, const plan::PlanItem& it, int rows,
                                                   int n, const plan::PlanRow& my_row, const float (&own_o)[R][D / 32],
                                                   const float (&own_lse)[R], float lane_lse, float* stage, int lane) {
  constexpr int DL = D / 32;
  constexpr int kOther = kInLinePairs / R;  // other columns per row held at once
  static_assert(R >= 4 && kOther >= 1);
  const int group_size = p.q_heads / p.kv_heads;
  const int others = n - 1;
  float mx[R], w[R][kOther];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int base = __shfl_sync(0xffffffffu, my_row.state_base, r);
    const int stride = __shfl_sync(0xffffffffu, my_row.state_stride, r);
    const std::int64_t head_entry = std::int64_t{base} + it.kv_head * group_size + __shfl_sync(0xffffffffu, my_row.group, r);
    mx[r] = own_lse[r];
#pragma unroll
    for (int j = 0; j < kOther; ++j) {
      w[r][j] = __shfl_sync(0xffffffffu, lane_lse, (r * others + j) & 31);  // (lse until the max is known)
      if (r >= rows || j >= others) w[r][j] = -INFINITY;
      mx[r] = fmaxf(mx[r], w[r][j]);
    }
#pragma unroll
    for (int j = 0; j < kOther; ++j) {
      w[r][j] = mx[r] == -INFINITY ? 0.f : __expf(w[r][j] - mx[r]);  // 0 at -inf: never loaded
      const int column = j < it.column ? j : j + 1;  // the other columns, own skipped
      stage_state_o<D>(w[r][j] != 0.f, p.states.o + (head_entry + std::int64_t{column} * stride) * D, p.states.o,
                       stage + (r * kOther + j) * D, lane);
    }
  }
  stage_wait();
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    const float w_own = mx[r] == -INFINITY ? 0.f : __expf(own_lse[r] - mx[r]);
    float sum = w_own, acc[DL];
#pragma unroll
    for (int i = 0; i < DL; ++i) acc[i] = w_own * own_o[r][i];
#pragma unroll
    for (int j = 0; j < kOther; ++j) {
      sum += w[r][j];
#pragma unroll
      for (int i = 0; i < DL; ++i) acc[i] += w[r][j] * stage[(r * kOther + j) * D + lane * DL + i];
    }
    const float rs = sum > 0.f ? 1.f / sum : 0.f;
    const int token = __shfl_sync(0xffffffffu, my_row.token, r);
    const std::int64_t qi = std::int64_t{token} * p.q_heads + it.kv_head * group_size + __shfl_sync(0xffffffffu, my_row.group, r);
    T* out = static_cast<T*>(p.out) + qi * D + lane * DL;
#pragma unroll
    for (int i = 0; i < DL; ++i) out[i] = ptx::from_float<T>(acc[i] * rs);
    if (lane == 0) p.out_lse[qi] = mx[r] == -INFINITY ? -INFINITY : mx[r] + __logf(sum);
  }
}

// The last arrival's merge of its group's rows (<= 8) over n state columns: the arithmetic of
// merge_states_chunk (weights exp(lse - max), their sum and the weighted o in column order),
// with the loads reordered for latency (merge_states_chunk per (row, 4 dims) makes each lane
// walk its rows one after another, every row two passes of dependent L2 round trips: ~48 round
// trips for 8 rows x 17 columns; see perf-notes: v11). Here: every lse at once (one round trip), each row's weights into shared memory by lane r, then each
// lane's two (row, 4 dims) chunks with kMergeBatch o loads of each in flight. `scratch` is the
// warp's K/V staging area (free after the key loop); returns false, having done nothing, when
// the weights do not fit it (the caller merges with merge_states_chunk).
template <class T, int D>
__device__ __forceinline__ bool merge_rows_in_warp(const PagedAttentionParams& p, const plan::PlanItem& it, int rows,
                                                   int n, const plan::PlanRow& my_row, float* scratch,
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
