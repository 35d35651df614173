// The decode kernel's pass over one item's keys (decode_attention.cuh): its Q, the stream of
// 32-key chunks copied into the warp's shared memory, and each chunk's scores, online softmax
// and P.V, on the scalar path (items of 1-2 rows) or on the tensor cores (3-8 rows). One warp
// runs every piece here; the arrays are the warp's slices of shared memory.
#pragma once

#include <cstdint>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_params.cuh"
#include "backend/cuda/decode_shape.cuh"
#include "backend/cuda/mma.cuh"

namespace hydragen::cuda {

// The mma path's Q: B fragments of Q^T (row fg = lane / 4, dims 16 ks + 2 ft (+ 8) with
// ft = lane % 4; rows past `rows` are zero: zero scores, never written), its O^T accumulators
// zeroed, and the key limits of the lane's two rows 2 ft and 2 ft + 1.
template <class T, int D>
__device__ __forceinline__ void load_q_fragments(const PagedAttentionParams& p, const plan::PlanItem& it,
                                                 const plan::PlanRow& my_row, int rows, int group_size, int lane,
                                                 std::uint32_t (&qf)[D / 16][2], float (&of)[D / 16][4],
                                                 int (&lim2)[2]) {
  const int fg = lane >> 2, ft = lane & 3;
  const int token = __shfl_sync(0xffffffffu, my_row.token, fg);
  const int gq = __shfl_sync(0xffffffffu, my_row.group, fg);
  const auto* q = reinterpret_cast<const std::uint32_t*>(
      static_cast<const T*>(p.q) + (std::int64_t{token} * p.q_heads + it.kv_head * group_size + gq) * D);
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    qf[ks][0] = fg < rows ? q[ks * 8 + ft] : 0u;
    qf[ks][1] = fg < rows ? q[ks * 8 + 4 + ft] : 0u;
#pragma unroll
    for (int c = 0; c < 4; ++c) of[ks][c] = 0.f;
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) lim2[j] = __shfl_sync(0xffffffffu, my_row.key_limit, 2 * ft + j);
}

// The scalar path's Q: rows [0, R) as fp32 in sq ([R][D]), the scale folded in; rows past
// `rows` are zero.
template <class T, int D, int R>
__device__ __forceinline__ void stage_q_rows(const PagedAttentionParams& p, const plan::PlanItem& it,
                                             const plan::PlanRow& my_row, int rows, int group_size, float* sq,
                                             int lane) {
  constexpr int DL = DecodeShape<T, D>::kDims;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int token = __shfl_sync(0xffffffffu, my_row.token, r);
    const int g = __shfl_sync(0xffffffffu, my_row.group, r);
    float f[DL];
#pragma unroll
    for (int i = 0; i < DL; ++i) f[i] = 0.f;
    if (r < rows) {
      const std::int64_t qi = std::int64_t{token} * p.q_heads + it.kv_head * group_size + g;
      const T* q = static_cast<const T*>(p.q) + qi * D + lane * DL;
      unpack_v<T, DL>(*reinterpret_cast<const VWord<DL>*>(q), f);
    }
#pragma unroll
    for (int i = 0; i < DL; ++i) sq[r * D + lane * DL + i] = f[i] * p.scale_log2;
  }
}

// The item's keys in chunks of kChunk: a piece's first half, and its second where it holds
// more than kChunk keys.
struct DecodeChunk {
  plan::PlanPiece piece;
  int index;  // piece index in p.pieces
  int first;  // 0 or kChunk: the half
  int slot;   // this lane's key's token slot in the pools (0 past the chunk's keys)
};

// Pool token slot of this lane's key of the chunk at `first` in piece pc, 0 past the piece's
// keys. Shuffled as 32 bits (the copies).
__device__ __forceinline__ int lane_key_slot(const PagedAttentionParams& p, const plan::PlanPiece& pc, int first,
                                             int lane) {
  return lane < pc.tokens - first ? piece_key_slot(p, pc, first + lane) : 0;
}

// The first half of piece `index`.
__device__ __forceinline__ void first_half(const PagedAttentionParams& p, int index, int lane, DecodeChunk& out) {
  out.index = index, out.first = 0, out.piece = p.pieces[index];
  out.slot = lane_key_slot(p, out.piece, 0, lane);
}

// The chunk after c (false: c is the item's last, before piece pieces_end).
template <int kChunk>
__device__ __forceinline__ bool advance(const PagedAttentionParams& p, const DecodeChunk& c, int pieces_end, int lane,
                                        DecodeChunk& out) {
  if (c.first == 0 && c.piece.tokens > kChunk) {
    out = {c.piece, c.index, kChunk, lane_key_slot(p, c.piece, kChunk, lane)};
    return true;
  }
  if (c.index + 1 >= pieces_end) return false;
  first_half(p, c.index + 1, lane, out);
  return true;
}

// Chunk c's rows of one pool into dst, one copy group, kRowLanes lanes per row (coalesced):
// swizzled (DecodeShape::swizzled) or, for the scalar path's V, plain. The mma path reads all
// kChunk rows, so its rows past the chunk's keys are zero-filled (a stale or never-written V
// row times p = 0 could be NaN); the scalar path copies the chunk's rows only.
template <class T, int D, bool kMma>
__device__ __forceinline__ void issue_chunk(const PagedAttentionParams& p, int kv_head, const DecodeChunk& c, T* dst,
                                            const T* pool, bool swizzle, int lane) {
  using Shape = DecodeShape<T, D>;
  constexpr int kRowsPerStep = 32 / Shape::kRowLanes;
  const int sub = (lane % Shape::kRowLanes) * 8;
  const int count = min(c.piece.tokens - c.first, Shape::kChunk);
  const int steps = kMma ? Shape::kChunk / kRowsPerStep : (count + kRowsPerStep - 1) / kRowsPerStep;
#pragma unroll 4
  for (int i = 0; i < steps; ++i) {
    const int key = i * kRowsPerStep + lane / Shape::kRowLanes;
    const int slot = __shfl_sync(0xffffffffu, c.slot, key);  // (slot 0 past the keys)
    const std::int64_t off = (std::int64_t{slot} * p.kv_heads + kv_head) * D + sub;
    T* to = dst + (swizzle ? Shape::swizzled(key, sub / 8) : key * D + sub);
    ptx::cp_async_16(to, pool + off, key < count);
  }
  ptx::cp_async_commit();
}

// One chunk on the tensor cores (items of 3-8 rows), transposed so the rows are the mma's
// N = 8: S^T = K Q^T (two 16-key tiles x D / 16 k-steps), the mask and the online softmax per
// row, then O^T += V^T P^T with P through shared memory as two T parts, hi + lo, so p keeps the
// scalar path's fp32 precision to ~2^-16 (P rounded to T alone moved a near-tie greedy token).
// Lane (fg, ft) = (lane / 4, lane % 4) holds, per 16-key tile, the scores of keys 16 mt + fg
// (+ 8) for rows 2 ft and 2 ft + 1, and of O^T the dims 16 mt + fg (+ 8) of the same rows.
// issue_next_k() runs once S is in registers (sk is free), wait_v() before P.V.
template <class T, int D, class IssueNextK, class WaitV>
__device__ __forceinline__ void mma_chunk(const PagedAttentionParams& p, const T* sk, const T* sv, float* sq,
                                          const std::uint32_t (&qf)[D / 16][2], float (&of)[D / 16][4],
                                          float (&mm)[2], float (&ll)[2], const int (&lim2)[2], int count,
                                          int first_pos, int lane, IssueNextK&& issue_next_k, WaitV&& wait_v) {
  using Shape = DecodeShape<T, D>;
  const int fg = lane >> 2, ft = lane & 3;
  const int mi = lane >> 3, mr = lane & 7;  // ldmatrix: this lane's matrix and row
  // Row 16 mt + 8 (mi & 1) + mr, chunk 2 ks + (mi >> 1), swizzled: the row's low bits are mr.
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
  issue_next_k();
  // Mask and scale; the max per row over the chunk: the 8 lanes of this ft.
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
  // P -> [row][key] as hi + lo T parts, the B fragments of P^T below.
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
}

// One chunk on the scalar path (items of <= R = 1 or 2 rows): lane j's key (its swizzled row of
// sk: conflict-free) against every row of Q in sq, the online softmax per row with p to sp
// ([R][kChunk]), then lane d's DL dims of each of the chunk's `count` V rows (plain in sv: the
// warp reads one contiguous row per key). `pos` is lane's key's context position.
// issue_next_k() runs once the scores are in registers, wait_v() before P.V.
template <class T, int D, int R, class IssueNextK, class WaitV>
__device__ __forceinline__ void scalar_chunk(const T* sk, const T* sv, const float* sq, float* sp, float (&m)[R],
                                             float (&l)[R], float (&acc)[R][D / 32], const int (&limit)[R],
                                             int count, int pos, int lane, IssueNextK&& issue_next_k,
                                             WaitV&& wait_v) {
  using Shape = DecodeShape<T, D>;
  constexpr int DL = Shape::kDims;
  const bool valid = lane < count;
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
  issue_next_k();
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!valid || pos >= limit[r]) s[r] = -INFINITY;
    sp[r * Shape::kChunk + lane] = softmax_step<DL>(s[r], m[r], l[r], acc[r]);
  }
  wait_v();  // (and the warp's p visible)
#pragma unroll 8
  for (int j = 0; j < count; ++j) {
    float v[DL];
    unpack_v<T, DL>(*reinterpret_cast<const VWord<DL>*>(sv + j * D + lane * DL), v);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float pr = sp[r * Shape::kChunk + j];
#pragma unroll
      for (int i = 0; i < DL; ++i) acc[r][i] = fmaf(pr, v[i], acc[r][i]);
    }
  }
  __syncwarp();  // sp and sv are rewritten for the next chunk
}

// The mma path's state in the scalar path's layout (acc[r][i]: row r, dims lane * DL + i; m and
// l whole rows), through shared memory: O^T into the Q slice, m and l per row into the p slice.
template <class T, int D, int R>
__device__ __forceinline__ void mma_state_to_rows(const float (&of)[D / 16][4], const float (&mm)[2], float (&ll)[2],
                                                  float* sq, float* sp, float (&m)[R], float (&l)[R],
                                                  float (&acc)[R][D / 32], int lane) {
  constexpr int DL = D / 32;
  const int fg = lane >> 2, ft = lane & 3;
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
  __syncwarp();  // (the merge after reuses sk only)
}

}  // namespace hydragen::cuda
