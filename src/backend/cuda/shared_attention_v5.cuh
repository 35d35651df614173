// v5 of the shared-segment attention kernel (HYDRAGEN_SHARED_KERNEL=v5; v4 in
// shared_attention.cuh stays the default until v5 is measured). Same tile, operands,
// swizzled layout, softmax and epilogue as v4 (shared_attention.cuh, read that first); only
// the order of the per-piece steps changes, so that every step keeps v4's proven operands:
//
//   v4, per piece i:  load(i+1) [index loads stall the thread] -> cp.async wait(i) ->
//                     barrier -> S(i) -> wait -> softmax -> O += P.V(i) -> wait -> barrier
//   v5, per piece i:  page-table reads of piece i+1 -> cp.async wait(i) -> wgmma wait
//                     (P.V(i-1)) -> barrier -> copies of piece i+1 issued -> S(i) -> wait ->
//                     softmax -> O += P.V(i) issued, NOT waited
//
// (1) One block barrier per piece instead of two. The single barrier says both things the two
//     of v4 said: every thread's cp.async copies of piece i have landed (each thread waited for
//     its own group and made them visible to the async proxy before arriving), and every
//     warpgroup has finished P.V(i-1) (each waited for its wgmma groups before arriving), so
//     stage (i+1)&1 == (i-1)&1 may be overwritten by the copies of piece i+1 after it.
// (2) P.V(i) runs on the tensor cores while the warpgroup waits for piece i+1's copies and the
//     barrier (v4 waited for it before the trailing barrier).
// (3) The next piece's page-table reads (two dependent global loads per thread) are issued
//     before the waits, into 32-bit token slots, so the copies after the barrier need no
//     global load (v4 stalled on them at the top of each piece).
// Register need is v4's: o[] is in flight across the barrier, s[] is dead there.
#pragma once

#include "backend/cuda/shared_attention.cuh"

namespace hydragen::cuda {

template <class T, int WG>
__global__ void __launch_bounds__(128 * WG, 2) shared_attention_v5_kernel(const PagedAttentionParams p) {
#if HYDRAGEN_WGMMA
  using Tile = WgmmaSharedTile<T, WG>;
  constexpr int D = Tile::D;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char* sq = smem;
  unsigned char* skv = smem + 2 * Tile::kQHalf;  // stage s: K at s * 2 * kKvBytes, V after it
  const std::uint32_t sq_addr = ptx::smem_addr(sq), skv_addr = ptx::smem_addr(skv);

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4;
  const int group_size = p.q_heads / p.kv_heads;
  const int item_count = *p.item_count;
  const T* kp = static_cast<const T*>(p.k_pool);
  const T* vp = static_cast<const T*>(p.v_pool);
  const int r0 = wg * 64 + (warp % 4) * 16 + lane / 4;  // this thread's rows: r0 and r0 + 8

  for (int item_index = blockIdx.x; item_index < item_count; item_index += gridDim.x) {
    const attn::PlanItem it = p.items[item_index];
    // Q tile: rows past row_count are zero (their scores are finite; they are never written).
    for (int id = tid; id < Tile::kRows * 16; id += Tile::kThreads) {
      const int r = id / 16, c = id % 16;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < it.row_count) {
        const attn::PlanRow row = p.rows[it.row_begin + r];
        const std::int64_t qi = std::int64_t{row.token} * p.q_heads + it.kv_head * group_size + row.group;
        val = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + qi * D) + c);
      }
      *reinterpret_cast<uint4*>(sq + swizzled_offset(r, c, Tile::kQHalf)) = val;
    }
    // A piece's copies in two steps: fetch() reads the page table into slot[] (the pool token
    // slot of each of this thread's keys, -1 past the piece: global loads, no shared memory),
    // issue() starts the cp.async copies into a stage. Token slots fit in 32 bits (a pool of
    // 2^31 tokens would hold 2^31 * Hkv * 128 * 2 bytes per K).
    constexpr int kPerThread = Tile::kKeys * 16 / Tile::kThreads;
    int slot[kPerThread];
    auto fetch = [&](int pi) {
      const attn::PlanPiece piece = p.pieces[it.piece_begin + pi];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int key = (tid + i * Tile::kThreads) / 16;
        const int tok = piece.token_begin + key;
        slot[i] = key < piece.tokens
                      ? (__ldg(p.pages + piece.page_offset + (tok >> p.page_shift)) << p.page_shift) + (tok & (p.page_size - 1))
                      : -1;
      }
    };
    auto issue = [&](int stage) {
      unsigned char* sk = skv + stage * 2 * Tile::kKvBytes;
      unsigned char* sv = sk + Tile::kKvBytes;
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int id = tid + i * Tile::kThreads;
        const int key = id / 16, c = id % 16;
        const bool valid = slot[i] >= 0;
        const std::int64_t off = valid ? (std::int64_t{slot[i]} * p.kv_heads + it.kv_head) * D + c * 8 : 0;
        const int o = swizzled_offset(key, c, Tile::kKvHalf);
        ptx::cp_async_16(sk + o, kp + off, valid);
        ptx::cp_async_16(sv + o, vp + off, valid);
      }
    };
    if (it.piece_count > 0) {
      fetch(0);
      issue(0);
      ptx::cp_async_commit();
    }

    int limit[2];
    for (int h = 0; h < 2; ++h)
      limit[h] = r0 + 8 * h < it.row_count ? p.rows[it.row_begin + r0 + 8 * h].key_limit : INT32_MAX;
    const int min_limit = min(limit[0], limit[1]);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;

    for (int pi = 0; pi < it.piece_count; ++pi) {
      const attn::PlanPiece piece = p.pieces[it.piece_begin + pi];
      const bool more = pi + 1 < it.piece_count;
      if (more) fetch(pi + 1);  // page-table reads overlap P.V(pi - 1) and the waits below
      // The only cp.async group in flight is piece pi's (issued last iteration, or before the loop).
      ptx::cp_async_wait<0>();
      wgmma::fence_proxy_async();  // cp.async / st.shared writes -> the tensor cores' reads
      // P.V(pi - 1) (issued at the end of the last iteration) must be done before the barrier:
      // after it, another thread's load(pi + 1) overwrites that piece's stage.
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      __syncthreads();
      // Piece pi + 1's copies into the stage the barrier freed (piece pi - 1's).
      if (more) {
        issue((pi + 1) & 1);
        ptx::cp_async_commit();
      }
      const std::uint32_t k_addr = skv_addr + (pi & 1) * 2 * Tile::kKvBytes;
      const std::uint32_t v_addr = k_addr + Tile::kKvBytes;

      float s[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) s[i] = 0.f;
      wgmma::fence_operands(s);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const std::uint64_t a = wgmma::desc(sq_addr + (kk >> 2) * Tile::kQHalf + wg * 64 * 128 + (kk & 3) * 32, 16, 1024);
        const std::uint64_t b = wgmma::desc(k_addr + (kk >> 2) * Tile::kKvHalf + (kk & 3) * 32, 16, 1024);
        wgmma_s<T>(s, a, b);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(s);

      // Mask (past the piece, or causal) only where needed; online softmax, scale folded in.
      if (piece.tokens < Tile::kKeys || piece.position + Tile::kKeys > min_limit) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = nt * 8 + (lane % 4) * 2 + (e & 1);
            if (!(key < piece.tokens && piece.position + key < limit[e / 2])) s[nt * 4 + e] = -INFINITY;
          }
      }
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int i = 0; i < 32; ++i) mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], s[i]);
      float alpha[2], base[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        const float mn = fmaxf(m[h], mx[h] * p.scale_log2);
        base[h] = mn == -INFINITY ? 0.f : mn;  // all masked so far: keep exp2 finite
        alpha[h] = exp2f(m[h] - base[h]);
        m[h] = mn;
        l[h] *= alpha[h];
      }
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int h = (i / 2) % 2;
        s[i] = exp2f(fmaf(s[i], p.scale_log2, -base[h]));
        l[h] += s[i];
      }
      // o is not in flight here: P.V(pi - 1) was waited for before the barrier.
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] *= alpha[(i / 2) % 2];

      wgmma::fence_operands(o);
      wgmma::fence();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t a[4] = {ptx::pack2<T>(s[8 * j + 0], s[8 * j + 1]), ptx::pack2<T>(s[8 * j + 2], s[8 * j + 3]),
                                    ptx::pack2<T>(s[8 * j + 4], s[8 * j + 5]), ptx::pack2<T>(s[8 * j + 6], s[8 * j + 7])};
        wgmma_o<T>(o, a, wgmma::desc(v_addr + j * 16 * 128, Tile::kKvHalf, 1024));
      }
      wgmma::commit();
      // Not waited for here: the next iteration waits before its barrier, the epilogue below.
    }
    wgmma::wait<0>();
    wgmma::fence_operands(o);
    ptx::cp_async_wait<0>();

    // (o / l, lse) of this thread's two rows straight from registers.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
      const int r = r0 + 8 * h;
      if (r < it.row_count) {
        const attn::PlanRow row = p.rows[it.row_begin + r];
        const std::int64_t e =
            row.state_base + std::int64_t{it.column} * row.state_stride + it.kv_head * group_size + row.group;
        const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
        float* dst = p.states.o + e * D + (lane % 4) * 2;
#pragma unroll
        for (int i = 0; i < 16; ++i)
          *reinterpret_cast<float2*>(dst + i * 8) = make_float2(o[i * 4 + 2 * h] * inv, o[i * 4 + 2 * h + 1] * inv);
        if (lane % 4 == 0) p.states.lse[e] = l[h] > 0.f ? (m[h] + __log2f(l[h])) * 0.69314718056f : -INFINITY;
      }
    }
    __syncthreads();  // shared memory (Q, stages) is reused by the next item
  }
#endif
}

// v5o (HYDRAGEN_SHARED_KERNEL=v5o, experimental): v5 plus FA3's intra-warpgroup overlap. Per
// piece i the warpgroup issues S(i) = Q.K(i)^T and then O += P(i-1).V(i-1) (P(i-1) kept packed
// in registers), waits for S(i) only (wgmma.wait_group 1), runs the softmax of piece i while
// P.V(i-1) runs on the tensor cores, then waits for it and rescales O. V therefore lags K by
// a piece: iteration i copies {K(i+1), V(i)} as one cp.async group (K(i+1) over K(i-1), read by
// S(i-1); V(i) over V(i-2), read by P.V(i-2): both waited for before the barrier), and the
// last piece's P.V runs after the loop. Live registers (O 64 + S 32 + P 16 + rest) do not fit
// in 128 (ptxas: "wgmma serialized due to insufficient register resources", 140 B spilled),
// so this kernel is 1 block (2 warpgroups, 168 registers) per SM: 132 slots instead of 264.
template <class T, int WG>
__global__ void __launch_bounds__(128 * WG, 1) shared_attention_v5o_kernel(const PagedAttentionParams p) {
#if HYDRAGEN_WGMMA
  using Tile = WgmmaSharedTile<T, WG>;
  constexpr int D = Tile::D;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char* sq = smem;
  unsigned char* skv = smem + 2 * Tile::kQHalf;  // stage s: K at s * 2 * kKvBytes, V after it
  const std::uint32_t sq_addr = ptx::smem_addr(sq), skv_addr = ptx::smem_addr(skv);

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4;
  const int group_size = p.q_heads / p.kv_heads;
  const int item_count = *p.item_count;
  const T* kp = static_cast<const T*>(p.k_pool);
  const T* vp = static_cast<const T*>(p.v_pool);
  const int r0 = wg * 64 + (warp % 4) * 16 + lane / 4;  // this thread's rows: r0 and r0 + 8

  for (int item_index = blockIdx.x; item_index < item_count; item_index += gridDim.x) {
    const attn::PlanItem it = p.items[item_index];
    // Q tile: rows past row_count are zero (their scores are finite; they are never written).
    for (int id = tid; id < Tile::kRows * 16; id += Tile::kThreads) {
      const int r = id / 16, c = id % 16;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (r < it.row_count) {
        const attn::PlanRow row = p.rows[it.row_begin + r];
        const std::int64_t qi = std::int64_t{row.token} * p.q_heads + it.kv_head * group_size + row.group;
        val = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + qi * D) + c);
      }
      *reinterpret_cast<uint4*>(sq + swizzled_offset(r, c, Tile::kQHalf)) = val;
    }
    // A piece's copies in two steps: fetch() reads the page table into slot[] (the pool token
    // slot of each of this thread's keys, -1 past the piece: global loads, no shared memory),
    // issue() starts the cp.async copies into a stage. Token slots fit in 32 bits (a pool of
    // 2^31 tokens would hold 2^31 * Hkv * 128 * 2 bytes per K).
    constexpr int kPerThread = Tile::kKeys * 16 / Tile::kThreads;
    int slot[kPerThread];      // piece pi + 1's token slots (fetched at the top of iteration pi)
    int slot_cur[kPerThread];  // piece pi's (its V is copied in iteration pi)
    auto fetch = [&](int pi) {
      const attn::PlanPiece piece = p.pieces[it.piece_begin + pi];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int key = (tid + i * Tile::kThreads) / 16;
        const int tok = piece.token_begin + key;
        slot[i] = key < piece.tokens
                      ? (__ldg(p.pages + piece.page_offset + (tok >> p.page_shift)) << p.page_shift) + (tok & (p.page_size - 1))
                      : -1;
      }
    };
    // issue(kv, stage, slots): K (kv = 0) or V (kv = 1) of one piece into a stage.
    auto issue = [&](int kv, int stage, const int (&sl)[kPerThread]) {
      unsigned char* dst = skv + stage * 2 * Tile::kKvBytes + kv * Tile::kKvBytes;
      const T* pool = kv == 0 ? kp : vp;
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int id = tid + i * Tile::kThreads;
        const int key = id / 16, c = id % 16;
        const bool valid = sl[i] >= 0;
        const std::int64_t off = valid ? (std::int64_t{sl[i]} * p.kv_heads + it.kv_head) * D + c * 8 : 0;
        ptx::cp_async_16(dst + swizzled_offset(key, c, Tile::kKvHalf), pool + off, valid);
      }
    };
    if (it.piece_count > 0) {  // K(0); V(0) goes out with K(1)
      fetch(0);
      issue(0, 0, slot);
      ptx::cp_async_commit();
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) slot_cur[i] = slot[i];
    }

    int limit[2];
    for (int h = 0; h < 2; ++h)
      limit[h] = r0 + 8 * h < it.row_count ? p.rows[it.row_begin + r0 + 8 * h].key_limit : INT32_MAX;
    const int min_limit = min(limit[0], limit[1]);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;

    std::uint32_t pk[16];  // P(pi - 1), packed: the A operand of P.V(pi - 1)
    for (int pi = 0; pi < it.piece_count; ++pi) {
      const attn::PlanPiece piece = p.pieces[it.piece_begin + pi];
      const bool more = pi + 1 < it.piece_count;
      if (more) fetch(pi + 1);
      // In flight: one cp.async group, {K(pi), V(pi - 1)}; no wgmma (all waited last iteration).
      ptx::cp_async_wait<0>();
      wgmma::fence_proxy_async();
      __syncthreads();  // K(pi), V(pi - 1) visible; every warpgroup done with S(pi - 1), P.V(pi - 2)
      // K(pi + 1) over K(pi - 1), V(pi) over V(pi - 2): both stages' readers are done.
      if (more) issue(0, (pi + 1) & 1, slot);
      issue(1, pi & 1, slot_cur);
      ptx::cp_async_commit();
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) slot_cur[i] = slot[i];
      const std::uint32_t k_addr = skv_addr + (pi & 1) * 2 * Tile::kKvBytes;
      const std::uint32_t v_prev = skv_addr + ((pi + 1) & 1) * 2 * Tile::kKvBytes + Tile::kKvBytes;  // V(pi - 1)

      float s[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) s[i] = 0.f;
      wgmma::fence_operands(s);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const std::uint64_t a = wgmma::desc(sq_addr + (kk >> 2) * Tile::kQHalf + wg * 64 * 128 + (kk & 3) * 32, 16, 1024);
        const std::uint64_t b = wgmma::desc(k_addr + (kk >> 2) * Tile::kKvHalf + (kk & 3) * 32, 16, 1024);
        wgmma_s<T>(s, a, b);
      }
      wgmma::commit();
      if (pi > 0) {  // O += P(pi - 1) . V(pi - 1), behind S(pi) on the tensor cores
        wgmma::fence_operands(o);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const std::uint32_t a[4] = {pk[4 * j], pk[4 * j + 1], pk[4 * j + 2], pk[4 * j + 3]};
          wgmma_o<T>(o, a, wgmma::desc(v_prev + j * 16 * 128, Tile::kKvHalf, 1024));
        }
        wgmma::commit();
        wgmma::wait<1>();  // S(pi) done; P.V(pi - 1) may still run during the softmax
      } else {
        wgmma::wait<0>();
      }
      wgmma::fence_operands(s);

      // Mask (past the piece, or causal) only where needed; online softmax, scale folded in.
      if (piece.tokens < Tile::kKeys || piece.position + Tile::kKeys > min_limit) {
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = nt * 8 + (lane % 4) * 2 + (e & 1);
            if (!(key < piece.tokens && piece.position + key < limit[e / 2])) s[nt * 4 + e] = -INFINITY;
          }
      }
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int i = 0; i < 32; ++i) mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], s[i]);
      float alpha[2], base[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        const float mn = fmaxf(m[h], mx[h] * p.scale_log2);
        base[h] = mn == -INFINITY ? 0.f : mn;  // all masked so far: keep exp2 finite
        alpha[h] = exp2f(m[h] - base[h]);
        m[h] = mn;
        l[h] *= alpha[h];
      }
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int h = (i / 2) % 2;
        s[i] = exp2f(fmaf(s[i], p.scale_log2, -base[h]));
        l[h] += s[i];
      }
      wgmma::wait<0>();  // P.V(pi - 1): o now holds keys < piece pi, relative to the old max
      wgmma::fence_operands(o);
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] *= alpha[(i / 2) % 2];
#pragma unroll
      for (int i = 0; i < 16; ++i) pk[i] = ptx::pack2<T>(s[2 * i], s[2 * i + 1]);
    }
    if (it.piece_count > 0) {  // the last piece's P.V
      ptx::cp_async_wait<0>();
      wgmma::fence_proxy_async();
      __syncthreads();  // V(last) visible
      const int last = it.piece_count - 1;
      const std::uint32_t v_last = skv_addr + (last & 1) * 2 * Tile::kKvBytes + Tile::kKvBytes;
      wgmma::fence_operands(o);
      wgmma::fence();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t a[4] = {pk[4 * j], pk[4 * j + 1], pk[4 * j + 2], pk[4 * j + 3]};
        wgmma_o<T>(o, a, wgmma::desc(v_last + j * 16 * 128, Tile::kKvHalf, 1024));
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(o);
    }

    // (o / l, lse) of this thread's two rows straight from registers.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
      l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
      const int r = r0 + 8 * h;
      if (r < it.row_count) {
        const attn::PlanRow row = p.rows[it.row_begin + r];
        const std::int64_t e =
            row.state_base + std::int64_t{it.column} * row.state_stride + it.kv_head * group_size + row.group;
        const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
        float* dst = p.states.o + e * D + (lane % 4) * 2;
#pragma unroll
        for (int i = 0; i < 16; ++i)
          *reinterpret_cast<float2*>(dst + i * 8) = make_float2(o[i * 4 + 2 * h] * inv, o[i * 4 + 2 * h + 1] * inv);
        if (lane % 4 == 0) p.states.lse[e] = l[h] > 0.f ? (m[h] + __log2f(l[h])) * 0.69314718056f : -INFINITY;
      }
    }
    __syncthreads();  // shared memory (Q, stages) is reused by the next item
  }
#endif
}

// Host side, as prepare_shared_wgmma / launch_shared_wgmma (same tile, same shared memory).
// kOverlap picks v5o.
template <class T, int WG, bool kOverlap = false>
int prepare_shared_v5() {
  using Tile = WgmmaSharedTile<T, WG>;
  auto kernel = kOverlap ? shared_attention_v5o_kernel<T, WG> : shared_attention_v5_kernel<T, WG>;
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess || attr.binaryVersion != 90) {
    cudaGetLastError();
    return 0;
  }
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Tile::kThreads, Tile::kSmemBytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return blocks;
}

template <class T, int WG, bool kOverlap = false>
void launch_shared_v5(const PagedAttentionParams& p, int grid, cudaStream_t stream) {
  using Tile = WgmmaSharedTile<T, WG>;
  if constexpr (kOverlap)
    shared_attention_v5o_kernel<T, WG><<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
  else
    shared_attention_v5_kernel<T, WG><<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
}

}  // namespace hydragen::cuda
