// The suffix (decode) kernel: one WARP per suffix item, no tensor cores. Memory-bound work
// wants many independent items in flight per SM, so each warp runs its item on its own (4
// items per 128-thread block, non-persistent grid: blocks past the plan's item count exit at
// once) and stages its K/V in its own slice of shared memory.
//
// Per item (<= kRows rows of one sequence and kv head, a list of pieces of <= 64 keys):
//   keys in chunks of 32 (half a piece): the chunk's K and V rows are copied to shared memory
//   with cp.async, kRowLanes lanes per row (coalesced), all at once: one memory round trip
//   per chunk. Items of 1-2 rows: lane j owns key j of the chunk and computes its score for
//   every row against Q kept as fp32 in shared memory (broadcast reads); online softmax per
//   row over the chunk (max by 5 shuffles; l kept per lane, summed once at the end); p goes
//   to shared memory; then lane d owns D/32 output dims and runs over the chunk's V rows
//   against p. Items of 3-8 rows (GQA) run the same chunk on the tensor cores, transposed so
//   the rows are the mma's N = 8 (decode_item, kMma: S^T = K Q^T and O^T += V^T P^T with
//   mma.sync m16n8k16, K and V by ldmatrix, Q in registers, P through shared memory as two
//   T parts, hi + lo, so p keeps the scalar path's fp32 precision to ~2^-16);
//   the scalar path's instructions per row and key made 4-row items latency-bound on their
//   own instruction stream. When the item is its merge group's only suffix item (no suffix
//   split: the common decode case) and its rows have at most one shared state (one unsplit
//   stacked column), it merges its own state in registers with that one (complete: the shared launch
//   precedes this one in the stream) and writes the final output -- no state write, no
//   fence, no ticket. Otherwise the items write (o / l, lse) to their state column, and the
//   last arrival of the merge group (atomic ticket, one fence by lane 0) merges -- or, where
//   the runner follows this launch with the merge launch (PagedAttentionParams::merge_launch),
//   the items of a split group (items > 1) return once written and split_merge_kernel merges.
#pragma once

#include <cstdint>
#include <type_traits>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_params.cuh"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/decode_merge.cuh"
#include "backend/cuda/decode_shape.cuh"
#include "backend/cuda/mma.cuh"

namespace hydragen::cuda {

// One item of <= R rows (R: 1, 2, 4 or 8; the kernel picks the smallest that holds it, so an
// MHA decode row does 1/8 of the arithmetic of a GQA group of 8).
template <class T, int D, int R>
__device__ __forceinline__ void decode_item(const PagedAttentionParams& p, const plan::PlanItem& it, float* sq,
                                            float* sp, T* sk, T* sv, int lane) {
  using Shape = DecodeShape<T, D>;
  constexpr int DL = Shape::kDims;
  const int group_size = p.q_heads / p.kv_heads;
  const int rows = it.row_count;
  // Row r's fields live in lane r; broadcast by shuffles.
  plan::PlanRow my_row{0, 0, 0, 0, 0};
  if (lane < rows) my_row = p.rows[it.row_begin + lane];
  const T* kp = static_cast<const T*>(p.k_pool);
  const T* vp = static_cast<const T*>(p.v_pool);

  // Pool token slot of this lane's key of the chunk at `first` in piece pc, 0 past the
  // piece's keys. Shuffled as 32 bits (the V copies below).
  auto key_slot = [&](const plan::PlanPiece& pc, int first) {
    return lane < pc.tokens - first ? piece_key_slot(p, pc, first + lane) : 0;
  };
  auto slot_offset = [&](int slot) { return (std::int64_t{slot} * p.kv_heads + it.kv_head) * D; };
  // The shared launch's states, read only after wait_for_shared_launch (this launch is the
  // shared one's programmatic dependent, so its blocks may start on SMs the shared grid leaves
  // free and stream their keys before that grid is done; see perf-notes: v23). One row
  // merging with one shared state (MHA decode: no split, one stacked column) fetches that
  // state, and one row alone in a group of 3..32 columns fetches the columns' lse (lane c
  // column c, for merge_row_in_registers), once its first chunk's keys are in flight, so
  // their latency overlaps the K/V chain. (Only for R = 1: for R >= 2 the live registers
  // through the loop made the wide kernel spill more; those wait after their keys.)
  int pre_col = -1;
  float pre_lse = -INFINITY, pre_o[Shape::kDims] = {};
  plan::PlanMergeGroup grp{0, 0};
  if constexpr (R != 2) grp = p.groups[it.group];  // (plan data: no wait)
  // Row 0's partial-state entry in `column` (its fields are lane 0's my_row).
  auto row0_entry = [&](int column) {
    return std::int64_t{__shfl_sync(0xffffffffu, my_row.state_base, 0)} +
           std::int64_t{column} * __shfl_sync(0xffffffffu, my_row.state_stride, 0) + it.kv_head * group_size +
           __shfl_sync(0xffffffffu, my_row.group, 0);
  };
  // A row alone in its group with 3..32 columns merges in line (merge_row_in_registers), and so
  // do 3-8 rows alone in theirs with at most kInLinePairs (row, other column) pairs
  // (merge_rows_in_line).
  const bool one_row_in_line = R == 1 && grp.items == 1 && grp.columns > 2 && grp.columns <= 32;
  // (Bound by R, not rows: merge_rows_in_line<R> holds kInLinePairs / R other columns per row.)
  const bool rows_in_line = R >= 4 && grp.items == 1 && grp.columns >= 2 && R * (grp.columns - 1) <= kInLinePairs;
  float early_lse = -INFINITY;
  bool fetched = false;
  auto fetch_shared_states = [&] {
    fetched = true;
    wait_for_shared_launch();
    if constexpr (R >= 4) {
      if (rows_in_line) {  // lane r * (n - 1) + j: row r's j-th other column (own skipped)
        const int others = grp.columns - 1, r = min(lane / others, R - 1), j = lane % others;
        const int column = j < it.column ? j : j + 1;
        const std::int64_t e = std::int64_t{__shfl_sync(0xffffffffu, my_row.state_base, r)} +
                               std::int64_t{column} * __shfl_sync(0xffffffffu, my_row.state_stride, r) +
                               it.kv_head * group_size + __shfl_sync(0xffffffffu, my_row.group, r);
        if (lane < rows * others) early_lse = __ldcg(p.states.lse + e);
      }
    }
    if constexpr (R == 1) {
      if (one_row_in_line) {
        const std::int64_t e = row0_entry(lane);  // (all lanes: the shuffles)
        if (lane < grp.columns && lane != it.column) early_lse = __ldcg(p.states.lse + e);
        return;
      }
      if (grp.items != 1 || grp.columns != 2) return;
      pre_col = it.column == 0 ? 1 : 0;
      const std::int64_t e = row0_entry(pre_col);
      pre_lse = __ldcg(p.states.lse + e);
      load_state_dims<Shape::kDims>(p.states.o + e * D + lane * Shape::kDims, pre_o);
    }
  };
  // The tensor-core path (items of 3-8 rows; see the file comment). Lane (fg, ft) = (lane / 4,
  // lane % 4) holds, per 16-key tile of a chunk, the scores of keys 16 mt + fg (+ 8) for rows
  // 2 ft and 2 ft + 1, and of O^T the dims 16 mt + fg (+ 8) of the same two rows.
  constexpr bool kMma = R >= 4;
  const int fg = lane >> 2, ft = lane & 3;
  [[maybe_unused]] std::uint32_t qf[kMma ? D / 16 : 1][2];  // B fragments of Q^T: row fg, dims 16 ks + 2 ft (+ 8)
  [[maybe_unused]] float of[kMma ? D / 16 : 1][4];          // O^T accumulators
  [[maybe_unused]] float mm[2] = {-INFINITY, -INFINITY}, ll[2] = {0.f, 0.f};
  [[maybe_unused]] int lim2[2] = {0, 0};
  int limit[R];
#pragma unroll
  for (int r = 0; r < R; ++r) limit[r] = __shfl_sync(0xffffffffu, my_row.key_limit, r);
  if constexpr (kMma) {
    const int token = __shfl_sync(0xffffffffu, my_row.token, fg);
    const int gq = __shfl_sync(0xffffffffu, my_row.group, fg);
    const auto* q = reinterpret_cast<const std::uint32_t*>(
        static_cast<const T*>(p.q) + (std::int64_t{token} * p.q_heads + it.kv_head * group_size + gq) * D);
#pragma unroll
    for (int ks = 0; ks < D / 16; ++ks) {
      qf[ks][0] = fg < rows ? q[ks * 8 + ft] : 0u;  // (rows past `rows`: zero scores, never written)
      qf[ks][1] = fg < rows ? q[ks * 8 + 4 + ft] : 0u;
#pragma unroll
      for (int c = 0; c < 4; ++c) of[ks][c] = 0.f;
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) lim2[j] = __shfl_sync(0xffffffffu, my_row.key_limit, 2 * ft + j);
  }
  // Q rows -> fp32 in shared memory (rows past `rows` are zero).
#pragma unroll
  for (int r = 0; r < (kMma ? 0 : R); ++r) {
    const int token = __shfl_sync(0xffffffffu, my_row.token, r);
    const int g = __shfl_sync(0xffffffffu, my_row.group, r);
    float f[DL];
#pragma unroll
    for (int i = 0; i < DL; ++i) f[i] = 0.f;
    if (r < rows) {
      const std::int64_t qi = std::int64_t{token} * p.q_heads + it.kv_head * group_size + g;
      const T* q = static_cast<const T*>(p.q) + qi * D + lane * DL;
      load_lane_dims<T, DL>(q, f);
    }
#pragma unroll
    for (int i = 0; i < DL; ++i) sq[r * D + lane * DL + i] = f[i] * p.scale_log2;
  }
  __syncwarp();

  float m[R], l[R], acc[R][DL];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    m[r] = -INFINITY, l[r] = 0.f;
#pragma unroll
    for (int i = 0; i < DL; ++i) acc[r][i] = 0.f;
  }

  // The item's keys in chunks of kChunk: a piece's first half, and its second where it holds
  // more than kChunk keys. A chunk's K and V rows go to sk and sv with cp.async, kRowLanes lanes
  // per row (coalesced), in two copy groups: the next chunk's K is issued as soon as this
  // chunk's scores are in registers (sk is free), its V as soon as this chunk's P.V is done (sv
  // is free). So each load runs under half a chunk of arithmetic, with no second stage of shared
  // memory (see perf-notes: Decode stage layout). The chunk after next's piece is read while
  // this one computes.
  struct Chunk {
    plan::PlanPiece piece;
    int index;  // piece index in p.pieces
    int first;  // 0 or kChunk: the half
    int slot;   // this lane's key's token slot in the pools (0 past the chunk's keys)
  };
  const int pieces_end = it.piece_begin + it.piece_count;
  // The first half of piece `index`.
  auto first_half = [&](int index, Chunk& out) {
    out.index = index, out.first = 0, out.piece = p.pieces[index];
    out.slot = key_slot(out.piece, 0);
  };
  // The chunk after c (false: c is the item's last).
  auto advance = [&](const Chunk& c, Chunk& out) {
    if (c.first == 0 && c.piece.tokens > Shape::kChunk) {
      out = {c.piece, c.index, Shape::kChunk, key_slot(c.piece, Shape::kChunk)};
      return true;
    }
    if (c.index + 1 >= pieces_end) return false;
    first_half(c.index + 1, out);
    return true;
  };
  constexpr int kRowsPerStep = 32 / Shape::kRowLanes;
  // D = 96: 12 lanes a row, 2 rows a step, lanes 24-31 idle (a zero-filling copy of theirs
  // would land on another row).
  constexpr bool kIdleLanes = kRowsPerStep * Shape::kRowLanes < 32;
  const int sub = (lane % Shape::kRowLanes) * 8;
  // Chunk c's rows of one pool into dst, one copy group: swizzled (DecodeShape::swizzled) or,
  // for the scalar path's V, plain. The mma path reads all kChunk rows, so its rows past the
  // chunk's keys are zero-filled (a stale or never-written V row times p = 0 could be NaN); the
  // scalar path copies the chunk's rows only (1 for a one-key suffix).
  auto issue = [&](const Chunk& c, T* dst, const T* pool, bool swizzle) {
    const int count = min(c.piece.tokens - c.first, Shape::kChunk);
    const int steps = kMma ? Shape::kChunk / kRowsPerStep : (count + kRowsPerStep - 1) / kRowsPerStep;
#pragma unroll 4
    for (int i = 0; i < steps; ++i) {
      const int key = i * kRowsPerStep + lane / Shape::kRowLanes;
      const std::int64_t off = slot_offset(__shfl_sync(0xffffffffu, c.slot, key)) + sub;  // slot 0 past the keys
      T* to = dst + (swizzle ? Shape::swizzled(key, sub / 8) : key * D + sub);
      if (!kIdleLanes || lane < kRowsPerStep * Shape::kRowLanes) ptx::cp_async_16(to, pool + off, key < count);
    }
    ptx::cp_async_commit();
  };
  Chunk cur{}, next{};
  bool has_cur = it.piece_count > 0, has_next = false;
  if (has_cur) {
    first_half(it.piece_begin, cur);
    issue(cur, sk, kp, true);
    issue(cur, sv, vp, kMma);
    if ((R == 1 || rows_in_line) && !fetched) fetch_shared_states();  // under the first chunk's keys
    has_next = advance(cur, next);
  }
  // The pending copy groups at a chunk's start: its K, then its V.
  auto issue_next_k = [&] {
    __syncwarp();  // every lane is done reading sk
    if (has_next) issue(next, sk, kp, true);
  };
  auto wait_v = [&] {  // pending: this chunk's V, then (has_next) the next chunk's K
    if (has_next) ptx::cp_async_wait<1>();
    else ptx::cp_async_wait<0>();
    __syncwarp();
  };
  while (has_cur) {
    const int first = cur.first;
    const int count = min(cur.piece.tokens - first, Shape::kChunk);  // valid keys in this chunk
    const bool valid = lane < count;
    ptx::cp_async_wait<1>();  // this lane's copies of the chunk's K (its V may be in flight);
    __syncwarp();             // the barrier makes every lane's visible
    if constexpr (kMma) {
      const int mi = lane >> 3, mr = lane & 7;  // ldmatrix: this lane's matrix and row
      // S^T = K Q^T: two 16-key tiles x D / 16 k-steps. Row 16 mt + 8 (mi & 1) + mr, chunk
      // 2 ks + (mi >> 1), swizzled: the row's low bits are mr.
      float s[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int c = 0; c < 4; ++c) s[mt][c] = 0.f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
          std::uint32_t a[4];
          ptx::ldmatrix_x4(a, sk + Shape::swizzled(mt * 16 + (mi & 1) * 8 + mr, ks * 2 + (mi >> 1)));
          ptx::mma_16816<T>(s[mt], a, qf[ks][0], qf[ks][1]);
        }
      }
      issue_next_k();  // sk is free: S is in registers
      // Mask and scale; the max per row over the chunk: the 8 lanes of this ft.
      const int first_pos = cur.piece.position + first;
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = mt * 16 + fg + (c >= 2 ? 8 : 0), j = c & 1;
          s[mt][c] = key < count && first_pos + key < lim2[j] ? s[mt][c] * p.scale_log2 : -INFINITY;
          mx[j] = fmaxf(mx[j], s[mt][c]);
        }
      float base[2], alpha[2];
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int o = 4; o < 32; o *= 2) mx[j] = fmaxf(mx[j], __shfl_xor_sync(0xffffffffu, mx[j], o));
        const float mn = fmaxf(mm[j], mx[j]);
        base[j] = mn == -INFINITY ? 0.f : mn;  // a row masked so far keeps exp2 finite
        alpha[j] = ptx::exp2_approx(mm[j] - base[j]);
        mm[j] = mn;
      }
      // P -> [row][key] as hi + lo T parts (p within ~2^-16: the scalar path's fp32 p; P
      // rounded to bf16 alone moved a tiny model's near-tie greedy token), the B fragments of
      // P^T below.
      T* pt = reinterpret_cast<T*>(sq);
      T* pt_lo = pt + 8 * Shape::kPRow;
      float psum[2] = {0.f, 0.f};
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int key = mt * 16 + fg + (c >= 2 ? 8 : 0), j = c & 1;
          const float pr = ptx::exp2_approx(s[mt][c] - base[j]);
          psum[j] += pr;
          const T hi = ptx::from_float<T>(pr);
          pt[(2 * ft + j) * Shape::kPRow + key] = hi;
          pt_lo[(2 * ft + j) * Shape::kPRow + key] = ptx::from_float<T>(pr - ptx::to_float<T>(hi));
        }
#pragma unroll
      for (int j = 0; j < 2; ++j) ll[j] = ll[j] * alpha[j] + psum[j];
#pragma unroll
      for (int mt = 0; mt < D / 16; ++mt) {
        of[mt][0] *= alpha[0], of[mt][1] *= alpha[1];
        of[mt][2] *= alpha[0], of[mt][3] *= alpha[1];
      }
      wait_v();  // (and the warp's P visible)
      // O^T += V^T (P_hi + P_lo)^T: D / 16 dim tiles x two 16-key k-steps.
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const int at = fg * Shape::kPRow + kk * 16 + 2 * ft;
        const std::uint32_t b0 = *reinterpret_cast<const std::uint32_t*>(pt + at);
        const std::uint32_t b1 = *reinterpret_cast<const std::uint32_t*>(pt + at + 8);
        const std::uint32_t c0 = *reinterpret_cast<const std::uint32_t*>(pt_lo + at);
        const std::uint32_t c1 = *reinterpret_cast<const std::uint32_t*>(pt_lo + at + 8);
#pragma unroll
        for (int mt = 0; mt < D / 16; ++mt) {
          std::uint32_t a[4];
          ptx::ldmatrix_x4_trans(a, sv + Shape::swizzled(kk * 16 + (mi >> 1) * 8 + mr, mt * 2 + (mi & 1)));
          ptx::mma_16816<T>(of[mt], a, b0, b1);
          ptx::mma_16816<T>(of[mt], a, c0, c1);
        }
      }
      __syncwarp();  // P and sv are rewritten for the next chunk
    } else {
      // Scores: this lane's key (its swizzled row of sk: conflict-free) against every row.
      float s[R];
#pragma unroll
      for (int r = 0; r < R; ++r) s[r] = 0.f;
      if (valid) {
#pragma unroll
        for (int c = 0; c < Shape::kKeyLoads; ++c) {
          float k[8];
          unpack8<T>(*reinterpret_cast<const uint4*>(sk + Shape::swizzled(lane, c)), k);
#pragma unroll
          for (int r = 0; r < R; ++r) s[r] = dot8(sq + r * D + c * 8, k, s[r]);
        }
      }
      issue_next_k();  // sk is free: the scores are in registers
      const int pos = cur.piece.position + first + lane;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!valid || pos >= limit[r]) s[r] = -INFINITY;
        sp[r * Shape::kChunk + lane] = softmax_step<DL>(s[r], m[r], l[r], acc[r]);
      }
      wait_v();  // (and the warp's p visible)
      // o += p V: this lane's DL dims of each of the chunk's keys (uniform loop bound), V from
      // shared memory (conflict-free: the warp reads one contiguous row per key).
#pragma unroll 8
      for (int j = 0; j < count; ++j) {
        float v[DL];
        load_lane_dims<T, DL>(sv + j * D + lane * DL, v);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float pr = sp[r * Shape::kChunk + j];
#pragma unroll
          for (int i = 0; i < DL; ++i) acc[r][i] = fmaf(pr, v[i], acc[r][i]);
        }
      }
      __syncwarp();  // sp and sv are rewritten for the next chunk
    }
    if (has_next) issue(next, sv, vp, kMma);  // under the next chunk's scores
    has_cur = has_next;
    if (has_cur) {
      cur = next;
      has_next = advance(cur, next);
    }
  }

  if (!fetched) fetch_shared_states();
  if constexpr (kMma) {
    // The mma layout -> the scalar path's (acc[r][i]: row r, dims lane * DL + i; m and l
    // whole rows), through shared memory: O^T into the Q slice, m and l per row into the p
    // slice.
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int o = 4; o < 32; o *= 2) ll[j] += __shfl_xor_sync(0xffffffffu, ll[j], o);
#pragma unroll
    for (int mt = 0; mt < D / 16; ++mt)
#pragma unroll
      for (int c = 0; c < 4; ++c) sq[(2 * ft + (c & 1)) * D + mt * 16 + fg + (c >= 2 ? 8 : 0)] = of[mt][c];
    if (fg == 0) {
#pragma unroll
      for (int j = 0; j < 2; ++j) sp[2 * ft + j] = mm[j], sp[8 + 2 * ft + j] = ll[j];
    }
    __syncwarp();
#pragma unroll
    for (int r = 0; r < R; ++r) {
      m[r] = sp[r], l[r] = sp[8 + r];
#pragma unroll
      for (int i = 0; i < DL; ++i) acc[r][i] = sq[r * D + lane * DL + i];
    }
    __syncwarp();  // (the merge below reuses sk only)
  }
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

  // The only suffix item of its rows and at most one other state (one unsplit stacked column;
  // R <= 2, whose other state was fetched under the keys): merge in registers here.
  if constexpr (R == 2) grp = p.groups[it.group];
  if constexpr (R >= 4) {
    if (rows_in_line) {
      float own_o[R][DL];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int i = 0; i < DL; ++i) own_o[r][i] = acc[r][i] * inv[r];
      merge_rows_in_line<T, D, R>(p, it, rows, grp.columns, my_row, own_o, lse, early_lse, reinterpret_cast<float*>(sk),
                                  lane);
      return;
    }
  }
  if (grp.items == 1 && (grp.columns == 1 || (R <= 2 && grp.columns == 2))) {
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
      if (R <= 2 && grp.columns > 1) {
        // As merge_states_chunk, in column order; column it.column is this item's own state.
        const int stride = __shfl_sync(0xffffffffu, my_row.state_stride, r);
        const std::int64_t first =
            __shfl_sync(0xffffffffu, my_row.state_base, r) + std::int64_t{it.kv_head} * group_size + g;
        float mx = lse[r];
        for (int c = 0; c < grp.columns; ++c)
          if (c != it.column)
            mx = fmaxf(mx, c == pre_col ? pre_lse : __ldcg(p.states.lse + first + std::int64_t{c} * stride));
        if (mx == -INFINITY) {
#pragma unroll
          for (int i = 0; i < DL; ++i) o[i] = 0.f;
        } else {
          float sum = 0.f, a[DL];
#pragma unroll
          for (int i = 0; i < DL; ++i) a[i] = 0.f;
          for (int c = 0; c < grp.columns; ++c) {
            const std::int64_t e = first + std::int64_t{c} * stride;
            const bool own = c == it.column, pre = c == pre_col;
            const float w = __expf((own ? lse[r] : pre ? pre_lse : __ldcg(p.states.lse + e)) - mx);
            if (w == 0.f) continue;  // an empty or negligible state
            float x[DL];
            if (own || pre) {
#pragma unroll
              for (int i = 0; i < DL; ++i) x[i] = own ? o[i] : pre_o[i];
            } else {
              load_state_dims<DL>(p.states.o + e * D + lane * DL, x);
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
    return;
  }
  // Row 0's output through merge_row_in_registers (one row of <= 32 columns). In line: this
  // warp's state in registers, the others' lse fetched under the keys (no state write, fence or
  // ticket). Else (a split group's last arrival): every column from the buffer.
  auto merge_row0 = [&](bool in_line) {
    const std::int64_t head_entry = row0_entry(0), lane_entry = row0_entry(lane);
    const int head = it.kv_head * group_size + __shfl_sync(0xffffffffu, my_row.group, 0);
    const std::int64_t qi = std::int64_t{__shfl_sync(0xffffffffu, my_row.token, 0)} * p.q_heads + head;
    float o[DL];
#pragma unroll
    for (int i = 0; i < DL; ++i) o[i] = in_line ? acc[0][i] * inv[0] : 0.f;
    const float lane_lse = in_line ? early_lse : lane < grp.columns ? __ldcg(p.states.lse + lane_entry) : -INFINITY;
    merge_row_in_registers<T, D>(p, head_entry, __shfl_sync(0xffffffffu, my_row.state_stride, 0), qi, grp.columns,
                                 in_line ? it.column : -1, o, in_line ? lse[0] : -INFINITY, lane_lse,
                                 reinterpret_cast<float*>(sk), lane);
  };
  if (one_row_in_line) {
    merge_row0(true);
    return;
  }
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
    } else if constexpr (DL == 2) {
      *reinterpret_cast<float2*>(o) = make_float2(acc[r][0] * inv[r], acc[r][1] * inv[r]);
    } else {
#pragma unroll
      for (int i = 0; i < DL; ++i) o[i] = acc[r][i] * inv[r];
    }
    if (lane == 0) p.states.lse[e] = lse[r];
  }
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
    merge_row0(false);
    return;
  }
  // More rows: merge_rows_in_warp; more columns: merge_states_chunk, a (row, 4 dims) chunk per lane.
  if (rows > 1 &&
      merge_rows_in_warp<T, D>(p, it, rows, grp.columns, my_row, reinterpret_cast<float*>(sk), Shape::kStageFloats, lane))
    return;
  for (int id = lane; id < rows * (D / 4); id += 32) {
    const int r = id / (D / 4), c = (id % (D / 4)) * 4;
    const plan::PlanRow row = p.rows[it.row_begin + r];
    const int head = it.kv_head * group_size + row.group;
    float4 o;
    const float merged = merge_states_chunk(p.states, D, row.state_base + head, row.state_stride, grp.columns, c, &o);
    const std::int64_t qi = std::int64_t{row.token} * p.q_heads + head;
    T* out = static_cast<T*>(p.out) + qi * D + c;
    out[0] = ptx::from_float<T>(o.x), out[1] = ptx::from_float<T>(o.y);
    out[2] = ptx::from_float<T>(o.z), out[3] = ptx::from_float<T>(o.w);
    if (c == 0) p.out_lse[qi] = merged;
  }
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
