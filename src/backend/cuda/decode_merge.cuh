// The decode kernel's merge of a group's rows (decode_attention.cuh), by one warp: an item
// alone in its merge group merges its own state in registers with the group's other columns
// (no state write, fence or ticket), and the last arrival of a split group merges every
// column from the state buffer. The other columns' o come through shared memory in batches of
// whole columns, every copy of a batch in flight at once.
#pragma once

#include <cstdint>

#include "attn/paged_plan.h"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/paged_attention.cuh"

namespace hydragen::cuda {

// Scratch (floats) of merge_rows_staged: header [64], the rows' lse/weights [R x n] (padded to
// 16 bytes), then the staged o of `columns` columns x R rows, D floats each.
inline constexpr int kStagedMergeHeader = 64;  // base int64 [8], qi int64 [8], stride [8], lse [8], inv [8], own lse [8]
__host__ __device__ constexpr int staged_merge_columns(int max_rows, int n, int head_dim, int scratch_floats) {
  return (scratch_floats - kStagedMergeHeader - (max_rows * n + 3) / 4 * 4) / (head_dim * max_rows);
}

// Merges rows 0..rows-1 (<= R) of item `it` over the n state columns of its group and writes
// the output rows and their lse. own >= 0: column `own` is this warp's state, in registers
// (o[r]: normalised, own_lse[r]; the same in every lane, o[r][i] the dims lane * DL + i), and
// the others are read from the state buffer (complete). own < 0: every column is read (the
// last arrival of a ticket). The arithmetic is merge_states_chunk's (weights exp(lse - max),
// their sum, the weighted o; a zero weight's entry is never read, it may be unwritten), each
// row's columns summed in column order after the own state. early_lse (R == 1, n <= 32): lane
// c's holds column c's lse, loaded under the keys; the caller passes have_early. The rows'
// fields come from my_row (lane r: row r). `scratch`: the warp's K/V stage (free after the
// keys), 16-byte aligned. Returns false, having done nothing, when one column of R rows does
// not fit it (the caller merges another way).
template <class T, int D, int R>
__device__ __forceinline__ bool merge_rows_staged(const PagedAttentionParams& p, const attn::PlanItem& it, int rows,
                                                  int n, int own, float (&o)[R][D / 32], const float (&own_lse)[R],
                                                  float early_lse, bool have_early, const attn::PlanRow& my_row,
                                                  float* scratch, int scratch_floats, int lane) {
  constexpr int DL = D / 32;
  const int batch = staged_merge_columns(R, n, D, scratch_floats);  // columns per batch (warp-uniform)
  if (batch < 1) return false;
  auto* s_base = reinterpret_cast<std::int64_t*>(scratch);    // entry of (row, column 0)
  auto* s_qi = reinterpret_cast<std::int64_t*>(scratch + 16);  // output row (token * Hq + head)
  int* s_stride = reinterpret_cast<int*>(scratch + 32);
  float* s_lse = scratch + 40;
  float* s_inv = scratch + 48;
  float* s_own = scratch + 56;
  float* w = scratch + kStagedMergeHeader;                     // [R][n]: lse, then weights
  float* staged = w + (R * n + 3) / 4 * 4;                     // [batch][R][D]
  const int group_size = p.q_heads / p.kv_heads;
  if (lane < rows) {
    const int head = it.kv_head * group_size + my_row.group;
    s_base[lane] = std::int64_t{my_row.state_base} + head;
    s_qi[lane] = std::int64_t{my_row.token} * p.q_heads + head;
    s_stride[lane] = my_row.state_stride;
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (lane == r) s_own[r] = own_lse[r];
  __syncwarp();
  // Every lse at once (one round trip per 32 x kMergeBatch of them).
  if (have_early) {
    if (lane < n) w[lane] = lane == own ? s_own[0] : early_lse;
  } else {
    const int pairs = R * n;
    for (int q0 = 0; q0 < pairs; q0 += 32 * kMergeBatch) {
      float v[kMergeBatch];
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j) {
        const int q = q0 + j * 32 + lane, r = q / n, c = q - r * n;
        v[j] = -INFINITY;  // rows past `rows`: never merged
        if (q < pairs && r < rows)
          v[j] = c == own ? s_own[r] : __ldcg(p.states.lse + s_base[r] + std::int64_t{c} * s_stride[r]);
      }
#pragma unroll
      for (int j = 0; j < kMergeBatch; ++j)
        if (q0 + j * 32 + lane < pairs) w[q0 + j * 32 + lane] = v[j];
    }
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
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float wo = own >= 0 && r < rows ? w[r * n + own] : 0.f;
#pragma unroll
    for (int i = 0; i < DL; ++i) o[r][i] = wo != 0.f ? o[r][i] * wo : 0.f;
  }
  // The other columns, `batch` at a time: (row r, column c0 + j) goes to staged slot j * R + r,
  // its D floats copied as D / 4 16-byte chunks over the lanes.
  for (int c0 = 0; c0 < n; c0 += batch) {
    const int c1 = min(n, c0 + batch);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;
      for (int c = c0; c < c1; ++c) {
        if (c == own || w[r * n + c] == 0.f) continue;
        const float* src = p.states.o + (s_base[r] + std::int64_t{c} * s_stride[r]) * D;
        float* dst = staged + ((c - c0) * R + r) * D;
        for (int k = lane; k < D / 4; k += 32) ptx::cp_async_16(dst + 4 * k, src + 4 * k, true);
      }
    }
    ptx::cp_async_commit();
    ptx::cp_async_wait<0>();
    __syncwarp();  // every lane's copies visible to the warp
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;
      for (int c = c0; c < c1; ++c) {
        const float wt = w[r * n + c];
        if (c == own || wt == 0.f) continue;
        const float* x = staged + ((c - c0) * R + r) * D + lane * DL;
#pragma unroll
        for (int i = 0; i < DL; ++i) o[r][i] += wt * x[i];
      }
    }
    __syncwarp();  // the next batch rewrites the slots
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    const float inv = s_inv[r];
    T* out = static_cast<T*>(p.out) + s_qi[r] * D + lane * DL;
#pragma unroll
    for (int i = 0; i < DL; ++i) out[i] = ptx::from_float<T>(o[r][i] * inv);
    if (lane == 0) p.out_lse[s_qi[r]] = s_lse[r];
  }
  return true;
}

}  // namespace hydragen::cuda
