// The shared-segment kernel on mma.sync tensor cores: the shared launch's kernel for builds
// without sm_90a and head dims without wgmma kernels (launch_choice.h, SharedKernel::mma).
// One item = (a range of a stacked segment's pieces, kv head, tile of 128 stacked query rows);
// 8 warps, each 16 rows against the whole 64-key block (a GEMM on tensor cores).
// Per item: FlashAttention-2 loop over the item's pieces (<= 64 keys each, read through the
// page table with cp.async into a double-buffered stage), online softmax in the exp2 domain:
//   s = q.k * scale * log2(e);  m' = max(m, max_j s_j);  l' = l * 2^(m - m') + sum_j 2^(s_j - m');
//   o' = o * 2^(m - m') + sum_j 2^(s_j - m') v_j;   lse = (m + log2 l) * ln 2.
// The item's (o / l, lse) goes to its column of the partial-state buffer; the suffix launch
// merges it.
#pragma once

#include <cstdint>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_params.cuh"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/mma.cuh"

namespace hydragen::cuda {

template <class T, int D>
struct MmaSharedTile {
  static constexpr int kWarps = 8;
  static constexpr int kRows = 16 * kWarps;
  static constexpr int kKeys = plan::kBlockTokens;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kStride = D + 8;  // halves; 16-byte pad: conflict-free ldmatrix
  static constexpr int kChunks = D / 8;  // 16-byte chunks per row
  static constexpr int kQBytes = kRows * kStride * 2;
  static constexpr int kStageBytes = 2 * 2 * kKeys * kStride * 2;  // K and V, 2 stages
  static constexpr int kScratchBytes = (kRows * D + 4 * kRows) * 4;  // o, (m, l), (1/l, lse)
  static constexpr int kSmemBytes = kQBytes + (kStageBytes > kScratchBytes ? kStageBytes : kScratchBytes);
  static_assert(D % 16 == 0 && kKeys % 16 == 0);
};

template <class T, int D>
__device__ __forceinline__ void load_piece(const PagedAttentionParams& p, const plan::PlanPiece& piece, int kv_head,
                                           T* sk, T* sv) {
  using Tile = MmaSharedTile<T, D>;
  const T* kp = static_cast<const T*>(p.k_pool);
  const T* vp = static_cast<const T*>(p.v_pool);
  for (int id = threadIdx.x; id < Tile::kKeys * Tile::kChunks; id += Tile::kThreads) {
    const int key = id / Tile::kChunks, c = id % Tile::kChunks;
    const bool valid = key < piece.tokens;
    std::int64_t off = 0;
    if (valid) {
      const int tok = piece.token_begin + key;
      const std::int64_t page = __ldg(p.pages + piece.page_offset + (tok >> p.page_shift));
      off = (((page << p.page_shift) + (tok & (p.page_size - 1))) * p.kv_heads + kv_head) * D + c * 8;
    }
    ptx::cp_async_16(sk + key * Tile::kStride + c * 8, kp + off, valid);
    ptx::cp_async_16(sv + key * Tile::kStride + c * 8, vp + off, valid);
  }
}

template <class T, int D>
__global__ void __launch_bounds__(MmaSharedTile<T, D>::kThreads) shared_mma_kernel(const PagedAttentionParams p) {
  using Tile = MmaSharedTile<T, D>;
  constexpr int S = Tile::kStride;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = reinterpret_cast<T*>(smem + Tile::kQBytes);  // [2][kKeys][S]
  T* sv = sk + 2 * Tile::kKeys * S;
  float* so = reinterpret_cast<float*>(smem + Tile::kQBytes);  // epilogue, aliases the stages
  float* sml = so + Tile::kRows * D;                            // [2][kRows]: m, l
  float* srow = sml + 2 * Tile::kRows;                          // [2][kRows]: 1/l, lse
  __shared__ int s_last;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group_size = p.q_heads / p.kv_heads;
  allow_dependent_launch();  // (the suffix launch may be this launch's dependent)
  wait_for_shared_launch();  // (a no-op: this launch is no dependent)
  const int item_count = *p.item_count;

  for (int item_index = blockIdx.x; item_index < item_count; item_index += gridDim.x) {
    const plan::PlanItem it = p.items[item_index];
    // Q tile: rows past row_count are zero (their scores are finite; they are never written).
    for (int id = threadIdx.x; id < Tile::kRows * Tile::kChunks; id += Tile::kThreads) {
      const int r = id / Tile::kChunks, c = id % Tile::kChunks;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < it.row_count) {
        const plan::PlanRow row = p.rows[it.row_begin + r];
        const std::int64_t qi = std::int64_t{row.token} * p.q_heads + it.kv_head * group_size + row.group;
        val = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + qi * D) + c);
      }
      *reinterpret_cast<uint4*>(sq + r * S + c * 8) = val;
    }
    if (it.piece_count > 0) load_piece<T, D>(p, p.pieces[it.piece_begin], it.kv_head, sk, sv);
    ptx::cp_async_commit();

    const int r0 = warp * 16 + lane / 4;  // this thread's rows: r0 and r0 + 8
    int limit[2];
    for (int h = 0; h < 2; ++h)
      limit[h] = r0 + 8 * h < it.row_count ? p.rows[it.row_begin + r0 + 8 * h].key_limit : INT32_MAX;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float acc[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
    __syncthreads();
    std::uint32_t qf[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      ptx::ldmatrix_x4(qf[kk], sq + (warp * 16 + (lane / 8 % 2) * 8 + lane % 8) * S + kk * 16 + (lane / 16) * 8);

    for (int pi = 0; pi < it.piece_count; ++pi) {
      const plan::PlanPiece piece = p.pieces[it.piece_begin + pi];
      if (pi + 1 < it.piece_count) {
        const int nx = (pi + 1) & 1;
        load_piece<T, D>(p, p.pieces[it.piece_begin + pi + 1], it.kv_head, sk + nx * Tile::kKeys * S,
                         sv + nx * Tile::kKeys * S);
        ptx::cp_async_commit();
        ptx::cp_async_wait<1>();
      } else {
        ptx::cp_async_wait<0>();
      }
      __syncthreads();
      const T* k = sk + (pi & 1) * Tile::kKeys * S;
      const T* v = sv + (pi & 1) * Tile::kKeys * S;
      constexpr int NT = Tile::kKeys / 8;
      float s[NT][4];
#pragma unroll
      for (int i = 0; i < NT; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
        for (int np = 0; np < NT / 2; ++np) {
          std::uint32_t b[4];
          ptx::ldmatrix_x4(b, k + (np * 16 + (lane / 16) * 8 + lane % 8) * S + kk * 16 + (lane / 8 % 2) * 8);
          ptx::mma_16816<T>(s[2 * np], qf[kk], b[0], b[1]);
          ptx::mma_16816<T>(s[2 * np + 1], qf[kk], b[2], b[3]);
        }
      // Mask (past the piece, or causal), scale, online softmax.
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = nt * 8 + (lane % 4) * 2 + (e & 1);
          const bool ok = key < piece.tokens && piece.position + key < limit[e / 2];
          s[nt][e] = ok ? s[nt][e] * p.scale_log2 : -INFINITY;
          mx[e / 2] = fmaxf(mx[e / 2], s[nt][e]);
        }
      float alpha[2], base[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        const float mn = fmaxf(m[h], mx[h]);
        base[h] = mn == -INFINITY ? 0.f : mn;  // all masked so far: keep exp2 finite
        alpha[h] = exp2f(m[h] - base[h]);
        m[h] = mn;
        l[h] *= alpha[h];
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[nt][e] = exp2f(s[nt][e] - base[e / 2]);
          l[e / 2] += s[nt][e];
        }
#pragma unroll
      for (int i = 0; i < D / 8; ++i) {
        acc[i][0] *= alpha[0];
        acc[i][1] *= alpha[0];
        acc[i][2] *= alpha[1];
        acc[i][3] *= alpha[1];
      }
#pragma unroll
      for (int ks = 0; ks < NT / 2; ++ks) {
        const std::uint32_t a[4] = {ptx::pack2<T>(s[2 * ks][0], s[2 * ks][1]), ptx::pack2<T>(s[2 * ks][2], s[2 * ks][3]),
                                    ptx::pack2<T>(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                                    ptx::pack2<T>(s[2 * ks + 1][2], s[2 * ks + 1][3])};
#pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
          std::uint32_t b[4];
          ptx::ldmatrix_x4_trans(b, v + (ks * 16 + (lane / 8 % 2) * 8 + lane % 8) * S + dn * 16 + (lane / 16) * 8);
          ptx::mma_16816<T>(acc[2 * dn], a, b[0], b[1]);
          ptx::mma_16816<T>(acc[2 * dn + 1], a, b[2], b[3]);
        }
      }
      __syncthreads();  // the stage is overwritten by the load two pieces ahead
    }
    ptx::cp_async_wait<0>();
    __syncthreads();

    // (o / l, lse) of each row through shared memory, then to the item's state column.
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    for (int id = threadIdx.x; id < Tile::kRows * D; id += Tile::kThreads) so[id] = 0.f;
    if (lane % 4 == 0)
      for (int h = 0; h < 2; ++h) {
        sml[r0 + 8 * h] = m[h];
        sml[Tile::kRows + r0 + 8 * h] = l[h];
      }
    __syncthreads();
    float scale[2];
    for (int h = 0; h < 2; ++h) {
      const int r = r0 + 8 * h;
      float mt = -INFINITY, lt = 0.f;
      mt = fmaxf(mt, sml[r]);
      const float mw = sml[r];
      lt += mw == -INFINITY ? 0.f : sml[Tile::kRows + r] * exp2f(mw - mt);
      scale[h] = m[h] == -INFINITY ? 0.f : exp2f(m[h] - mt);
      if (lane % 4 == 0) {
        srow[r] = lt > 0.f ? 1.f / lt : 0.f;
        srow[Tile::kRows + r] = lt > 0.f ? (mt + __log2f(lt)) * 0.69314718056f : -INFINITY;
      }
    }
#pragma unroll
    for (int i = 0; i < D / 8; ++i) {
      const int col = i * 8 + (lane % 4) * 2;
      float* o0 = so + r0 * D + col;
      float* o1 = so + (r0 + 8) * D + col;
      o0[0] = acc[i][0] * scale[0], o0[1] = acc[i][1] * scale[0];
      o1[0] = acc[i][2] * scale[1], o1[1] = acc[i][3] * scale[1];
    }
    __syncthreads();
    for (int id = threadIdx.x; id < it.row_count * (D / 4); id += Tile::kThreads) {
      const int r = id / (D / 4), c = (id % (D / 4)) * 4;
      const plan::PlanRow row = p.rows[it.row_begin + r];
      const std::int64_t e = row.state_base + std::int64_t{it.column} * row.state_stride +
                             it.kv_head * group_size + row.group;
      const float inv = srow[r];
      const float4 x = *reinterpret_cast<const float4*>(so + r * D + c);
      *reinterpret_cast<float4*>(p.states.o + e * D + c) = make_float4(x.x * inv, x.y * inv, x.z * inv, x.w * inv);
      if (c == 0) p.states.lse[e] = srow[Tile::kRows + r];
    }
    // An item of a merge group (group >= 0; never a shared item): its last arrival merges
    // every column of its rows. Kept though the shared launch never takes it: without it ptxas
    // allocates this kernel's registers differently (see perf-notes: The CUDA wing as code).
    if (it.group >= 0) {
      // One thread releases the block's writes (ordered before it by the barrier) and takes
      // a ticket, as cooperative groups' grid sync does.
      __syncthreads();
      if (threadIdx.x == 0) s_last = take_merge_ticket(p.group_arrivals + it.group, p.groups[it.group].items);
      __syncthreads();
      if (s_last) {
        const int columns = p.groups[it.group].columns;
        for (int id = threadIdx.x; id < it.row_count * (D / 4); id += Tile::kThreads) {
          const int r = id / (D / 4), c = (id % (D / 4)) * 4;
          const plan::PlanRow row = p.rows[it.row_begin + r];
          const int head = it.kv_head * group_size + row.group;
          float4 o;
          const float lse = merge_states_chunk(p.states, D, row.state_base + head, row.state_stride, columns, c, &o);
          const std::int64_t qi = std::int64_t{row.token} * p.q_heads + head;
          T* out = static_cast<T*>(p.out) + qi * D + c;
          out[0] = ptx::from_float<T>(o.x), out[1] = ptx::from_float<T>(o.y);
          out[2] = ptx::from_float<T>(o.z), out[3] = ptx::from_float<T>(o.w);
          if (c == 0) p.out_lse[qi] = lse;
        }
      }
    }
    __syncthreads();  // shared memory is reused by the next item
  }
}

}  // namespace hydragen::cuda
