// The decode kernel's reads of the shared launch's states and the ends of an item
// (decode_attention.cuh): the other columns fetched early for the in-line merges, a lone item's
// rows merged in registers and written out, the item's state written to its column, and a
// split group's rows merged by its last arrival. One warp runs each; row r's PlanRow is lane
// r's my_row (broadcast by shuffles).
#pragma once

#include <cstdint>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_params.cuh"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/decode_merge.cuh"
#include "backend/cuda/decode_shape.cuh"
#include "backend/cuda/mma.cuh"

namespace hydragen::cuda {

// Row 0's partial-state entry in `column` (its fields are lane 0's my_row).
__device__ __forceinline__ std::int64_t row0_entry(const plan::PlanRow& my_row, const plan::PlanItem& it,
                                                   int group_size, int column) {
  return std::int64_t{__shfl_sync(0xffffffffu, my_row.state_base, 0)} +
         std::int64_t{column} * __shfl_sync(0xffffffffu, my_row.state_stride, 0) + it.kv_head * group_size +
         __shfl_sync(0xffffffffu, my_row.group, 0);
}

// What an item reads of the other columns of its merge group before its own state is done.
template <int DL>
struct EarlyStates {
  int pre_col = -1;  // a one-row item's one other column, fetched with its o (else -1)
  float pre_lse = -INFINITY, pre_o[DL] = {};
  float early_lse = -INFINITY;  // this lane's other column's lse, for the in-line merges
  bool fetched = false;
};

// The shared launch's states, read only after wait_for_shared_launch (this launch may be the
// shared one's programmatic dependent; see perf-notes: v23). One row merging with one shared
// state (MHA decode: no split, one stacked column) fetches that state; one row alone in a group
// of 3..32 columns (one_row_in_line) fetches the columns' lse, lane c column c; 3-8 rows alone in
// theirs (rows_in_line) fetch their other columns' lse, lane r * (n - 1) + j row r's j-th.
template <class T, int D, int R>
__device__ __forceinline__ void fetch_shared_states(const PagedAttentionParams& p, const plan::PlanItem& it,
                                                    const plan::PlanMergeGroup& grp, const plan::PlanRow& my_row,
                                                    int rows, int group_size, bool one_row_in_line, bool rows_in_line,
                                                    int lane, EarlyStates<D / 32>& s) {
  s.fetched = true;
  wait_for_shared_launch();
  if constexpr (R >= 4) {
    if (rows_in_line) {  // (own column skipped)
      const int others = grp.columns - 1, r = min(lane / others, R - 1), j = lane % others;
      const int column = j < it.column ? j : j + 1;
      const std::int64_t e = std::int64_t{__shfl_sync(0xffffffffu, my_row.state_base, r)} +
                             std::int64_t{column} * __shfl_sync(0xffffffffu, my_row.state_stride, r) +
                             it.kv_head * group_size + __shfl_sync(0xffffffffu, my_row.group, r);
      if (lane < rows * others) s.early_lse = __ldcg(p.states.lse + e);
    }
  }
  if constexpr (R == 1) {
    if (one_row_in_line) {
      const std::int64_t e = row0_entry(my_row, it, group_size, lane);  // (all lanes: the shuffles)
      if (lane < grp.columns && lane != it.column) s.early_lse = __ldcg(p.states.lse + e);
      return;
    }
    if (grp.items != 1 || grp.columns != 2) return;
    s.pre_col = it.column == 0 ? 1 : 0;
    const std::int64_t e = row0_entry(my_row, it, group_size, s.pre_col);
    s.pre_lse = __ldcg(p.states.lse + e);
    if constexpr (D / 32 == 4) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p.states.o + e * D + lane * 4));
      s.pre_o[0] = v.x, s.pre_o[1] = v.y, s.pre_o[2] = v.z, s.pre_o[3] = v.w;
    } else {
      const float2 v = __ldcg(reinterpret_cast<const float2*>(p.states.o + e * D + lane * 2));
      s.pre_o[0] = v.x, s.pre_o[1] = v.y;
    }
  }
}

// The only suffix item of its rows with at most one other state (R <= 2: the one fetched
// early), merged here in registers as merge_states_chunk does, in column order (column
// it.column is the item's own state); each row's output written.
template <class T, int D, int R>
__device__ __forceinline__ void write_lone_rows(const PagedAttentionParams& p, const plan::PlanItem& it, int rows,
                                                int columns, const plan::PlanRow& my_row, int group_size,
                                                const float (&acc)[R][D / 32], const float (&inv)[R],
                                                const float (&lse)[R], const EarlyStates<D / 32>& early, int lane) {
  constexpr int DL = D / 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    const int token = __shfl_sync(0xffffffffu, my_row.token, r);
    const int g = __shfl_sync(0xffffffffu, my_row.group, r);
    const std::int64_t qi = std::int64_t{token} * p.q_heads + it.kv_head * group_size + g;
    float o[DL];
#pragma unroll
    for (int i = 0; i < DL; ++i) o[i] = acc[r][i] * inv[r];
    float out_lse = lse[r];
    if (R <= 2 && columns > 1) {
      const int stride = __shfl_sync(0xffffffffu, my_row.state_stride, r);
      const std::int64_t first =
          __shfl_sync(0xffffffffu, my_row.state_base, r) + std::int64_t{it.kv_head} * group_size + g;
      float mx = lse[r];
      for (int c = 0; c < columns; ++c)
        if (c != it.column)
          mx = fmaxf(mx, c == early.pre_col ? early.pre_lse : __ldcg(p.states.lse + first + std::int64_t{c} * stride));
      if (mx == -INFINITY) {
#pragma unroll
        for (int i = 0; i < DL; ++i) o[i] = 0.f;
      } else {
        float sum = 0.f, a[DL];
#pragma unroll
        for (int i = 0; i < DL; ++i) a[i] = 0.f;
        for (int c = 0; c < columns; ++c) {
          const std::int64_t e = first + std::int64_t{c} * stride;
          const bool own = c == it.column, pre = c == early.pre_col;
          const float w = __expf((own ? lse[r] : pre ? early.pre_lse : __ldcg(p.states.lse + e)) - mx);
          if (w == 0.f) continue;  // an empty or negligible state
          float x[DL];
          if (own || pre) {
#pragma unroll
            for (int i = 0; i < DL; ++i) x[i] = own ? o[i] : early.pre_o[i];
          } else if constexpr (DL == 4) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(p.states.o + e * D + lane * DL));
            x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
          } else {
            const float2 v = __ldcg(reinterpret_cast<const float2*>(p.states.o + e * D + lane * DL));
            x[0] = v.x, x[1] = v.y;
          }
          sum += w;
#pragma unroll
          for (int i = 0; i < DL; ++i) a[i] += w * x[i];
        }
        const float rs = 1.f / sum;
#pragma unroll
        for (int i = 0; i < DL; ++i) o[i] = a[i] * rs;
        out_lse = mx + __logf(sum);
      }
    }
    T* out = static_cast<T*>(p.out) + qi * D + lane * DL;
#pragma unroll
    for (int i = 0; i < DL; ++i) out[i] = ptx::from_float<T>(o[i]);
    if (lane == 0) p.out_lse[qi] = out_lse;
  }
}

// Row 0's output through merge_row_in_registers (one row of <= 32 columns). In line: this
// warp's state in registers, the others' lse fetched under the keys (no state write, fence or
// ticket). Else (a split group's last arrival): every column from the buffer.
template <class T, int D, int R>
__device__ __forceinline__ void merge_row0(const PagedAttentionParams& p, const plan::PlanItem& it, int columns,
                                           const plan::PlanRow& my_row, int group_size, const float (&acc)[R][D / 32],
                                           const float (&inv)[R], const float (&lse)[R], float early_lse,
                                           bool in_line, float* stage, int lane) {
  constexpr int DL = D / 32;
  const std::int64_t head_entry = row0_entry(my_row, it, group_size, 0);
  const std::int64_t lane_entry = row0_entry(my_row, it, group_size, lane);
  const int head = it.kv_head * group_size + __shfl_sync(0xffffffffu, my_row.group, 0);
  const std::int64_t qi = std::int64_t{__shfl_sync(0xffffffffu, my_row.token, 0)} * p.q_heads + head;
  float o[DL];
#pragma unroll
  for (int i = 0; i < DL; ++i) o[i] = in_line ? acc[0][i] * inv[0] : 0.f;
  const float lane_lse = in_line ? early_lse : lane < columns ? __ldcg(p.states.lse + lane_entry) : -INFINITY;
  merge_row_in_registers<T, D>(p, head_entry, __shfl_sync(0xffffffffu, my_row.state_stride, 0), qi, columns,
                               in_line ? it.column : -1, o, in_line ? lse[0] : -INFINITY, lane_lse, stage, lane);
}

// The item's (o / l, lse) per row to its column of the partial-state buffer.
template <class T, int D, int R>
__device__ __forceinline__ void write_row_states(const PagedAttentionParams& p, const plan::PlanItem& it, int rows,
                                                 const plan::PlanRow& my_row, int group_size,
                                                 const float (&acc)[R][D / 32], const float (&inv)[R],
                                                 const float (&lse)[R], int lane) {
  constexpr int DL = D / 32;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    const int g = __shfl_sync(0xffffffffu, my_row.group, r);
    const int stride = __shfl_sync(0xffffffffu, my_row.state_stride, r);
    const int base = __shfl_sync(0xffffffffu, my_row.state_base, r);
    const std::int64_t e = base + std::int64_t{it.column} * stride + it.kv_head * group_size + g;
    float* o = p.states.o + e * D + lane * DL;
    if constexpr (DL == 4) {
      *reinterpret_cast<float4*>(o) =
          make_float4(acc[r][0] * inv[r], acc[r][1] * inv[r], acc[r][2] * inv[r], acc[r][3] * inv[r]);
    } else {
      *reinterpret_cast<float2*>(o) = make_float2(acc[r][0] * inv[r], acc[r][1] * inv[r]);
    }
    if (lane == 0) p.states.lse[e] = lse[r];
  }
}

// A group's rows over more columns than the batched merge holds: merge_states_chunk, a (row, 4
// dims) chunk per lane, every column from the buffer.
template <class T, int D>
__device__ __forceinline__ void merge_rows_in_chunks(const PagedAttentionParams& p, const plan::PlanItem& it, int rows,
                                                     int columns, int group_size, int lane) {
  for (int id = lane; id < rows * (D / 4); id += 32) {
    const int r = id / (D / 4), c = (id % (D / 4)) * 4;
    const plan::PlanRow row = p.rows[it.row_begin + r];
    const int head = it.kv_head * group_size + row.group;
    float4 o;
    const float merged = merge_states_chunk(p.states, D, row.state_base + head, row.state_stride, columns, c, &o);
    const std::int64_t qi = std::int64_t{row.token} * p.q_heads + head;
    T* out = static_cast<T*>(p.out) + qi * D + c;
    out[0] = ptx::from_float<T>(o.x), out[1] = ptx::from_float<T>(o.y);
    out[2] = ptx::from_float<T>(o.z), out[3] = ptx::from_float<T>(o.w);
    if (c == 0) p.out_lse[qi] = merged;
  }
}

}  // namespace hydragen::cuda
