// The suffix (decode) kernel: one WARP per suffix item. Memory-bound work wants many
// independent items in flight per SM, so each warp runs its item on its own (4 items per
// 128-thread block, non-persistent grid: blocks past the plan's item count exit at once) and
// stages its K/V in its own slice of shared memory.
//
// Per item (<= kRows rows of one sequence and kv head, a list of pieces of <= 64 keys), the
// keys in chunks of 32 (decode_keys.cuh): the chunk's K and V rows are copied to shared memory
// with cp.async, in two copy groups, the next chunk's K issued once this chunk's scores are in
// registers and its V once this chunk's P.V is done (see perf-notes: Decode stage layout).
// Items of 1-2 rows run a scalar chunk: lane j owns key j and computes its score for every row
// against Q kept as fp32 in shared memory, the online softmax per row, then lane d owns D / 32
// output dims and runs over the chunk's V rows against p. Items of 3-8 rows (GQA) run the same
// chunk on the tensor cores (mma_chunk), as the scalar path's instructions per row and key
// made them latency-bound. The end (decode_output.cuh): an item that is its merge group's only
// suffix item (the common decode case) with at most one other state, or whose other columns'
// lse fit the in-line merges, merges in registers with the shared launch's states (complete:
// that launch precedes this one) and writes the final output, with no state write, fence or
// ticket. Otherwise the items write (o / l, lse) to their state column, and the last arrival
// of the merge group (atomic ticket) merges; or, where the merge launch follows this one
// (PagedAttentionParams::merge_launch), the items of a split group return once written.
#pragma once

#include <cstdint>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_params.cuh"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/decode_keys.cuh"
#include "backend/cuda/decode_merge.cuh"
#include "backend/cuda/decode_output.cuh"
#include "backend/cuda/decode_shape.cuh"

namespace hydragen::cuda {

// One item of <= R rows (R: 1, 2, 4 or 8; the kernel picks the smallest that holds it, so an
// MHA decode row does 1/8 of the arithmetic of a GQA group of 8).
template <class T, int D, int R>
__device__ __forceinline__ void decode_item(const PagedAttentionParams& p, const plan::PlanItem& it, float* sq,
                                            float* sp, T* sk, T* sv, int lane) {
  using Shape = DecodeShape<T, D>;
  constexpr int DL = Shape::kDims;
  constexpr bool kMma = R >= 4;  // the tensor-core path
  const int group_size = p.q_heads / p.kv_heads;
  const int rows = it.row_count;
  // Row r's fields live in lane r; broadcast by shuffles.
  plan::PlanRow my_row{0, 0, 0, 0, 0};
  if (lane < rows) my_row = p.rows[it.row_begin + lane];
  const T* kp = static_cast<const T*>(p.k_pool);
  const T* vp = static_cast<const T*>(p.v_pool);

  // The merge group (plan data: no wait), and whether the item merges in line: one row alone in
  // its group with 3..32 columns (merge_row_in_registers), 3-8 rows alone in theirs with at most
  // kInLinePairs (row, other column) pairs (merge_rows_in_line; bound by R, not rows: it holds
  // kInLinePairs / R other columns per row). Those fetch the other columns' lse under their
  // first chunk's keys, and so does one row with one other state (its o too): their latency
  // overlaps the K/V chain. (Only for R = 1 and the in-line merges: for R >= 2 the registers
  // live through the loop made the wide builds spill more; those wait after their keys.)
  EarlyStates<DL> early;
  plan::PlanMergeGroup grp{0, 0};
  if constexpr (R != 2) grp = p.groups[it.group];
  const bool one_row_in_line = R == 1 && grp.items == 1 && grp.columns > 2 && grp.columns <= 32;
  const bool rows_in_line = R >= 4 && grp.items == 1 && grp.columns >= 2 && R * (grp.columns - 1) <= kInLinePairs;
  auto fetch = [&] {
    fetch_shared_states<T, D, R>(p, it, grp, my_row, rows, group_size, one_row_in_line, rows_in_line, lane, early);
  };

  // Q: the mma path's fragments in registers, the scalar path's rows in sq.
  [[maybe_unused]] std::uint32_t qf[kMma ? D / 16 : 1][2];
  [[maybe_unused]] float of[kMma ? D / 16 : 1][4];  // O^T accumulators
  [[maybe_unused]] float mm[2] = {-INFINITY, -INFINITY}, ll[2] = {0.f, 0.f};
  [[maybe_unused]] int lim2[2] = {0, 0};
  int limit[R];
#pragma unroll
  for (int r = 0; r < R; ++r) limit[r] = __shfl_sync(0xffffffffu, my_row.key_limit, r);
  if constexpr (kMma) load_q_fragments<T, D>(p, it, my_row, rows, group_size, lane, qf, of, lim2);
  else stage_q_rows<T, D, R>(p, it, my_row, rows, group_size, sq, lane);
  __syncwarp();

  float m[R], l[R], acc[R][DL];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY, l[r] = 0.f;
#pragma unroll
    for (int i = 0; i < DL; ++i) acc[r][i] = 0.f;
  }

  // The key loop: the first chunk's copies, then per chunk its scores (the next chunk's K
  // issued under them), P.V (its V after), the chunk after next's piece read meanwhile.
  const int pieces_end = it.piece_begin + it.piece_count;
  DecodeChunk cur{}, next{};
  bool has_cur = it.piece_count > 0, has_next = false;
  if (has_cur) {
    first_half(p, it.piece_begin, lane, cur);
    issue_chunk<T, D, kMma>(p, it.kv_head, cur, sk, kp, true, lane);
    issue_chunk<T, D, kMma>(p, it.kv_head, cur, sv, vp, kMma, lane);
    if ((R == 1 || rows_in_line) && !early.fetched) fetch();  // under the first chunk's keys
    has_next = advance<Shape::kChunk>(p, cur, pieces_end, lane, next);
  }
  // The pending copy groups at a chunk's start: its K, then its V.
  auto issue_next_k = [&] {
    __syncwarp();  // every lane is done reading sk
    if (has_next) issue_chunk<T, D, kMma>(p, it.kv_head, next, sk, kp, true, lane);
  };
  auto wait_v = [&] {  // pending: this chunk's V, then (has_next) the next chunk's K
    if (has_next) ptx::cp_async_wait<1>();
    else ptx::cp_async_wait<0>();
    __syncwarp();
  };
  while (has_cur) {
    const int first = cur.first;
    const int count = min(cur.piece.tokens - first, Shape::kChunk);  // valid keys in this chunk
    ptx::cp_async_wait<1>();  // this lane's copies of the chunk's K (its V may be in flight);
    __syncwarp();             // the barrier makes every lane's visible
    if constexpr (kMma)
      mma_chunk<T, D>(p, sk, sv, sq, qf, of, mm, ll, lim2, count, cur.piece.position + first, lane, issue_next_k, wait_v);
    else
      scalar_chunk<T, D, R>(sk, sv, sq, sp, m, l, acc, limit, count, cur.piece.position + first + lane, lane,
                            issue_next_k, wait_v);
    if (has_next) issue_chunk<T, D, kMma>(p, it.kv_head, next, sv, vp, kMma, lane);  // under the next chunk's scores
    has_cur = has_next;
    if (has_cur) {
      cur = next;
      has_next = advance<Shape::kChunk>(p, cur, pieces_end, lane, next);
    }
  }

  if (!early.fetched) fetch();
  if constexpr (kMma) mma_state_to_rows<T, D, R>(of, mm, ll, sq, sp, m, l, acc, lane);
  // Row sums (the mma path's are whole already); (o / l, lse) per row.
  float inv[R], lse[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float sum = l[r];
    if constexpr (!kMma) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    inv[r] = sum > 0.f ? 1.f / sum : 0.f;
    lse[r] = sum > 0.f ? (m[r] + __log2f(sum)) * 0.69314718056f : -INFINITY;
  }

  // The ends, in line first: the only suffix item of its rows with every other state at hand.
  if constexpr (R == 2) grp = p.groups[it.group];
  if constexpr (R >= 4) {
    if (rows_in_line) {
      float own_o[R][DL];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < DL; ++i) own_o[r][i] = acc[r][i] * inv[r];
      merge_rows_in_line<T, D, R>(p, it, rows, grp.columns, my_row, own_o, lse, early.early_lse,
                                  reinterpret_cast<float*>(sk), lane);
      return;
    }
  }
  if (grp.items == 1 && (grp.columns == 1 || (R <= 2 && grp.columns == 2))) {
    write_lone_rows<T, D, R>(p, it, rows, grp.columns, my_row, group_size, acc, inv, lse, early, lane);
    return;
  }
  if (one_row_in_line) {
    merge_row0<T, D, R>(p, it, grp.columns, my_row, group_size, acc, inv, lse, early.early_lse, true,
                        reinterpret_cast<float*>(sk), lane);
    return;
  }
  write_row_states<T, D, R>(p, it, rows, my_row, group_size, acc, inv, lse, lane);
  // Ticket: lane 0 releases the warp's writes (ordered before it by __syncwarp). The only
  // item of its group needs none: __syncwarp orders its lanes' state writes before their reads
  // below, and no other warp reads them (see perf-notes: v25).
  __syncwarp();
  if (grp.items > 1) {
    if (p.merge_launch) return;  // split_merge_kernel merges the group after this launch
    int last = 0;
    if (lane == 0) last = take_merge_ticket(p.group_arrivals + it.group, grp.items);
    last = __shfl_sync(0xffffffffu, last, 0);
    if (!last) return;
    __syncwarp();
  }
  // One row of <= 32 columns: in registers (every column from the buffer, own included).
  if (rows == 1 && grp.columns <= 32) {
    merge_row0<T, D, R>(p, it, grp.columns, my_row, group_size, acc, inv, lse, early.early_lse, false,
                        reinterpret_cast<float*>(sk), lane);
    return;
  }
  // More rows: merge_rows_in_warp; more columns: merge_states_chunk, a (row, 4 dims) chunk per lane.
  if (rows > 1 &&
      merge_rows_in_warp<T, D>(p, it, rows, grp.columns, my_row, reinterpret_cast<float*>(sk), Shape::kStageFloats, lane))
    return;
  merge_rows_in_chunks<T, D>(p, it, rows, grp.columns, group_size, lane);
}

// MinBlocks: what shared memory allows -- 2 for the multi-row builds (88 KB per block), 3 for
// the narrow one (70 KB per block). Rows: 0 for the general build (items of 1..8 rows: every
// path), else the one path R = Rows alone, for plans whose items all fit it (DecodeBuild,
// launch_choice.h): 1, the narrow build (its Q and p slices are 8x smaller, and the wider paths
// compiled into it made it spill); 4, items of 3-4 rows (a GQA group of 4); 8, items of 5-8
// rows (a GQA group of 8). The general build's cold paths stall its warps on instruction
// fetches (see perf-notes: Decode kernel builds). One warp per item; blocks past the plan's
// item count exit at once.
template <class T, int D, int MinBlocks = 3, int Rows = 0>
__global__ void __launch_bounds__(DecodeShape<T, D>::kThreads, MinBlocks) decode_attention_kernel(const PagedAttentionParams p) {
  using Shape = DecodeShape<T, D>;
  static_assert(Rows == 0 || Rows == 1 || Rows == 4 || Rows == 8);
  constexpr int L = Shape::layout_rows(Rows);
  extern __shared__ __align__(128) unsigned char decode_smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* sq = reinterpret_cast<float*>(decode_smem) + warp * Shape::warp_smem_floats(L);  // [L][D]
  float* sp = sq + L * D;                                                         // [L][kChunk]
  T* sk = reinterpret_cast<T*>(sp + L * Shape::kChunk);  // [kChunk][D], swizzled
  T* sv = sk + Shape::kChunk * D;                        // [kChunk][D], swizzled on the mma path
  // The merge launch's blocks may then wait on the SMs this grid frees.
  if (p.merge_launch) allow_dependent_launch();
  const int item_index = blockIdx.x * Shape::kWarps + warp;
  plan::PlanItem it;
  if (!load_suffix_item(p, item_index, it)) return;  // (plan data: written before the shared launch)
  if constexpr (Rows != 0) {  // the launch choice guarantees row_count <= Rows here
    decode_item<T, D, Rows>(p, it, sq, sp, sk, sv, lane);
  } else {
    if (it.row_count <= 1) decode_item<T, D, 1>(p, it, sq, sp, sk, sv, lane);
    else if (it.row_count <= 2) decode_item<T, D, 2>(p, it, sq, sp, sk, sv, lane);
    else if (it.row_count <= 4) decode_item<T, D, 4>(p, it, sq, sp, sk, sv, lane);
    else decode_item<T, D, 8>(p, it, sq, sp, sk, sv, lane);
  }
}

}  // namespace hydragen::cuda
