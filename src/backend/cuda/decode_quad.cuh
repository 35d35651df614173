// The suffix kernel for one-row items that are alone in their merge group (MHA decode: one
// query row per sequence and head, its suffix not split), four lanes per item (when:
// quad_rule in launch_choice.h; see perf-notes: v14-suffix, v16-quad).
//
// Why: decode_attention.cuh gives each item a warp. An MHA step at batch 1024 has 40960 such
// items, 26 per warp in flight one after another, each a chain of ~8 dependent memory round
// trips (item, row, Q, piece, page, K/V, the shared states, the output). Here a quad (four lanes) owns an item and each lane D / 4 of its dims, so a warp runs eight
// items side by side and a launch needs ~5 rounds of chains instead of 26.
//
// Per item: the other columns' lse (before the keys, so that round trip overlaps theirs); Q
// (D / 4 dims per lane in 4-dim granules interleaved across the quad, fp32, scale folded in);
// the keys one at a time, each key's K and V loaded together; a key's score is the quad's
// sum of its lanes' partial dot products (two shuffles within the quad); online softmax per
// key (exp2 domain); then the merge with the group's other columns (the
// stacked segments' states, complete: the shared launch precedes this one) in column order,
// as merge_states_chunk, and the output row and its lse. The arithmetic matches
// decode_attention.cuh's up to the order of the softmax's rescales.
#pragma once

#include <cstdint>
#include <type_traits>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/decode_shape.cuh"
#include "backend/cuda/attention_params.cuh"

namespace hydragen::cuda {

template <class T, int D>
struct QuadShape {
  static constexpr int kThreads = 4 * kQuadItemsPerBlock;
  static constexpr int kItemsPerBlock = kQuadItemsPerBlock;
  static constexpr int kDims = D / 4;             // dims per lane: 32 (D 128), 24 (D 96), 16 (D 64)
  static constexpr int kGranules = D / 16;        // a lane's 4-dim granules (see quad_dim)
  // One key in flight per lane: the registers let 4 blocks share an SM, so a launch of 40960
  // items needs ~2.5 rounds of load chains.
  static constexpr int kBlockKeys = 1;
  static constexpr int kMinBlocks = 4;            // resident blocks per SM (__launch_bounds__)
  static constexpr int kEarlyColumns = 8;         // columns whose lse is loaded before the keys (2 per lane)
  static_assert(D == 64 || D == 96 || D == 128);
};

// First dim of granule g of lane `sub`: the quad's four lanes own four adjacent granules, so
// each load or store instruction of the quad covers 32 contiguous bytes of a bf16/fp16 row
// (one sector) and 64 of an fp32 state row; contiguous D / 4 dims per lane would put the
// lanes' accesses 64 bytes apart (see perf-notes: v16-quad).
__device__ __forceinline__ int quad_dim(int g, int sub) { return (g * 4 + sub) * 4; }

// The quad's sum of x (its four lanes hold partial sums of the same quantity).
__device__ __forceinline__ float quad_sum(float x, unsigned mask) {
  x += __shfl_xor_sync(mask, x, 1);
  x += __shfl_xor_sync(mask, x, 2);
  return x;
}

template <class T>
__device__ __forceinline__ void unpack4(const uint2& u, float* f) {
  const float2 a = unpack2<T>(u.x), b = unpack2<T>(u.y);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
}

template <class T, int D>
__global__ void __launch_bounds__(QuadShape<T, D>::kThreads, QuadShape<T, D>::kMinBlocks)
    decode_quad_kernel(const PagedAttentionParams p) {
  using Shape = QuadShape<T, D>;
  constexpr int DQ = Shape::kDims, NG = Shape::kGranules, EC = Shape::kEarlyColumns, KB = Shape::kBlockKeys;
  const int lane = threadIdx.x % 32, sub = lane % 4;
  const unsigned mask = 0xFu << (lane & ~3);  // this quad's lanes
  const int item_index = blockIdx.x * Shape::kItemsPerBlock + threadIdx.x / 4;
  if (item_index >= *p.item_count) return;  // whole quads leave together
  const plan::PlanItem it = p.items[item_index];
  const plan::PlanRow row = p.rows[it.row_begin];  // one row (the runner's choice)
  const plan::PlanMergeGroup grp = p.groups[it.group];
  const int group_size = p.q_heads / p.kv_heads;
  const int head = it.kv_head * group_size + row.group;
  const std::int64_t qi = std::int64_t{row.token} * p.q_heads + head;
  const std::int64_t first = row.state_base + std::int64_t{head};
  const T* kp = static_cast<const T*>(p.k_pool);
  const T* vp = static_cast<const T*>(p.v_pool);

  // From here on the shared launch's states are read (and the output written). The lse of the
  // first 2 x 4 other columns now, lane `sub` columns sub and 4 + sub, so their round trip
  // overlaps the Q and K/V loads instead of following the keys (the merge reads the rest).
  wait_for_shared_launch();
  float early_lse[EC / 4];
#pragma unroll
  for (int k = 0; k < EC / 4; ++k) {
    const int c = 4 * k + sub;
    early_lse[k] = c < grp.columns && c != it.column ? __ldcg(p.states.lse + first + std::int64_t{c} * row.state_stride)
                                                     : -INFINITY;
  }

  float q[DQ];
  {
    const uint2* src = reinterpret_cast<const uint2*>(static_cast<const T*>(p.q) + qi * D);
#pragma unroll
    for (int g = 0; g < NG; ++g) {
      unpack4<T>(src[quad_dim(g, sub) / 4], q + 4 * g);
#pragma unroll
      for (int i = 0; i < 4; ++i) q[4 * g + i] *= p.scale_log2;
    }
  }
  float m = -INFINITY, l = 0.f, acc[DQ];
#pragma unroll
  for (int i = 0; i < DQ; ++i) acc[i] = 0.f;

  for (int pi = 0; pi < it.piece_count; ++pi) {
    const plan::PlanPiece piece = p.pieces[it.piece_begin + pi];
    for (int k0 = 0; k0 < piece.tokens; k0 += KB) {
      // Every K and V load of the block first.
      uint2 kr[KB][NG], vr[KB][NG];
#pragma unroll
      for (int j = 0; j < KB; ++j) {
#pragma unroll
        for (int g = 0; g < NG; ++g) kr[j][g] = vr[j][g] = make_uint2(0, 0);
        if (k0 + j >= piece.tokens) continue;  // past the piece: zeros, masked below
        const std::int64_t off = (std::int64_t{piece_key_slot(p, piece, k0 + j)} * p.kv_heads + it.kv_head) * D;
        const uint2* ks = reinterpret_cast<const uint2*>(kp + off);
        const uint2* vs = reinterpret_cast<const uint2*>(vp + off);
#pragma unroll
        for (int g = 0; g < NG; ++g) kr[j][g] = ks[quad_dim(g, sub) / 4], vr[j][g] = vs[quad_dim(g, sub) / 4];
      }
      float s[KB];
      float mx = m;
#pragma unroll
      for (int j = 0; j < KB; ++j) {
        float part = 0.f;
#pragma unroll
        for (int g = 0; g < NG; ++g) {
          float k[4];
          unpack4<T>(kr[j][g], k);
#pragma unroll
          for (int i = 0; i < 4; ++i) part = fmaf(q[4 * g + i], k[i], part);
        }
        s[j] = quad_sum(part, mask);
        const int pos = piece.position + k0 + j;
        if (k0 + j >= piece.tokens || pos >= row.key_limit) s[j] = -INFINITY;
        mx = fmaxf(mx, s[j]);
      }
      const float base = mx == -INFINITY ? 0.f : mx;  // a row masked so far keeps exp2 finite
      const float alpha = ptx::exp2_approx(m - base);
      m = mx;
      l *= alpha;
#pragma unroll
      for (int i = 0; i < DQ; ++i) acc[i] *= alpha;
#pragma unroll
      for (int j = 0; j < KB; ++j) {
        const float pr = ptx::exp2_approx(s[j] - base);
        l += pr;
        if (pr == 0.f) continue;  // a masked key
#pragma unroll
        for (int g = 0; g < NG; ++g) {
          float v[4];
          unpack4<T>(vr[j][g], v);
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[4 * g + i] = fmaf(pr, v[i], acc[4 * g + i]);
        }
      }
    }
  }

  // This item's state, then the merge with the group's other columns.
  const float inv = l > 0.f ? 1.f / l : 0.f;
  const float own_lse = l > 0.f ? (m + __log2f(l)) * 0.69314718056f : -INFINITY;
#pragma unroll
  for (int i = 0; i < DQ; ++i) acc[i] *= inv;
  float out_lse = own_lse;
  if (grp.columns > 1) {
    // The lse of the other columns, four per quad step (lane sub holds column c0 + sub; -inf
    // at its own column and past the group's): the first EC from before the keys.
    auto lane_lse = [&](int c0) {
      if (c0 < EC) {
        float v = -INFINITY;  // (selected, not indexed: an indexed array would live in local memory)
#pragma unroll
        for (int k = 0; k < EC / 4; ++k)
          if (4 * k == c0) v = early_lse[k];
        return v;
      }
      const int c = c0 + sub;
      return c < grp.columns && c != it.column ? __ldcg(p.states.lse + first + std::int64_t{c} * row.state_stride)
                                               : -INFINITY;
    };
    float mxl = own_lse;
    for (int c0 = 0; c0 < grp.columns; c0 += 4) mxl = fmaxf(mxl, lane_lse(c0));
    mxl = fmaxf(mxl, __shfl_xor_sync(mask, mxl, 1));
    mxl = fmaxf(mxl, __shfl_xor_sync(mask, mxl, 2));
    if (mxl == -INFINITY) {
#pragma unroll
      for (int i = 0; i < DQ; ++i) acc[i] = 0.f;
    } else {
      // Own state first (in place), then the others in column order, two columns' o in
      // flight at a time: their weights are known before any o is loaded, so the loads do not
      // wait for an lse round trip each (see perf-notes: v20-merge). A zero weight (an
      // empty or negligible state, whose o may be unwritten) loads nothing.
      const float4* column_o = reinterpret_cast<const float4*>(p.states.o + first * D);  // column 0's o
      const std::int64_t column_step = std::int64_t{row.state_stride} * (D / 4);          // float4s per column
      const float w_own = __expf(own_lse - mxl);
      float sum = w_own;
#pragma unroll
      for (int i = 0; i < DQ; ++i) acc[i] *= w_own;
#pragma unroll 1
      for (int c0 = 0; c0 < grp.columns; c0 += 4) {
        const float w_lane = __expf(lane_lse(c0) - mxl);  // 0 at -inf
#pragma unroll
        for (int k = 0; k < 4; k += 2) {
          float w[2];
          float4 x[2][NG];
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            w[j] = __shfl_sync(mask, w_lane, (lane & ~3) + k + j);
            const float4* src = column_o + std::int64_t{c0 + k + j} * column_step;
#pragma unroll
            for (int g = 0; g < NG; ++g) x[j][g] = w[j] != 0.f ? __ldcg(src + quad_dim(g, sub) / 4) : make_float4(0, 0, 0, 0);
          }
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            if (w[j] == 0.f) continue;
            sum += w[j];
#pragma unroll
            for (int g = 0; g < NG; ++g) {
              acc[4 * g + 0] += w[j] * x[j][g].x, acc[4 * g + 1] += w[j] * x[j][g].y;
              acc[4 * g + 2] += w[j] * x[j][g].z, acc[4 * g + 3] += w[j] * x[j][g].w;
            }
          }
        }
      }
      const float rs = 1.f / sum;
#pragma unroll
      for (int i = 0; i < DQ; ++i) acc[i] *= rs;
      out_lse = mxl + __logf(sum);
    }
  }
  uint2* out = reinterpret_cast<uint2*>(static_cast<T*>(p.out) + qi * D);
#pragma unroll
  for (int g = 0; g < NG; ++g)
    out[quad_dim(g, sub) / 4] = make_uint2(ptx::pack2<T>(acc[4 * g], acc[4 * g + 1]), ptx::pack2<T>(acc[4 * g + 2], acc[4 * g + 3]));
  if (sub == 0) p.out_lse[qi] = out_lse;
}

}  // namespace hydragen::cuda
