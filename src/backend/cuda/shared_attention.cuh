// The shared-segment attention kernel (kernel 1) on Hopper tensor cores (wgmma, sm_90a).
//
// One item = (range of a stacked segment's pieces, kv head, tile of 128 stacked query
// rows). Each of its two warpgroups (4 warps, 128 threads) owns 64 query rows and runs the
// FlashAttention-2 loop over the item's pieces (<= 64 keys each, read through the page table
// with cp.async into a double-buffered, 128B-swizzled stage):
//   S (64 x 64)  = Q (smem, K-major) . K^T (smem, K-major)      wgmma m64n64k16, 8 k-steps
//   online softmax on S in registers (exp2 domain, as in shared_mma.cuh)
//   O (64 x 128) += P (registers, bf16/f16) . V (smem, MN-major) wgmma m64n128k16, 4 k-steps
// Accumulators are per thread: S 32 floats, O 64 floats (vs 64 + 128 for a 32-row mma.sync
// warp), so two blocks of 2 warpgroups fit on an SM. The item's (o / l, lse) goes straight
// from registers to its column of the partial-state buffer; the suffix kernel merges it.
// head_dim 128 only; other head dims and non-sm_90a builds use shared_mma.cuh's kernel
// (launch_choice.h). Its helpers also serve shared_attention_ws.cuh's kernel.
//
// Per piece i, one block barrier (see perf-notes: v5):
//   page-table reads of piece i+1 -> cp.async wait (piece i) -> wgmma wait (P.V(i-1)) ->
//   barrier -> copies of piece i+1 issued -> S(i) -> wait -> softmax -> O += P.V(i) issued,
//   not waited
// The barrier says two things: every thread's cp.async copies of piece i have landed (each
// thread waited for its own group and made them visible to the async proxy before arriving),
// and every warpgroup has finished P.V(i-1) (each waited for its wgmma groups before
// arriving), so stage (i+1)&1 == (i-1)&1 may be overwritten by the copies of piece i+1 after
// it. P.V(i) runs on the tensor cores while the warpgroup waits for piece i+1's copies and the
// barrier. The page-table reads (two dependent global loads per thread) go into 32-bit token
// slots before the waits, so the copies after the barrier need no global load.
//
// Shared memory (1024-byte aligned; 128B swizzle: 16-byte chunk c of a 128-byte row r lives
// at chunk c ^ (r % 8)); a 128-element row is split into two 64-element halves, each half a
// [rows][128 B] array:
//   Q:      [2 halves][128 rows][128 B]
//   stage s (2): K [2 halves][64 keys][128 B], then V the same.
#pragma once

#include <cstdint>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/attention_params.cuh"
#include "backend/cuda/wgmma.cuh"

namespace hydragen::cuda {

template <class T>
struct WgmmaSharedTile {
  static constexpr int D = 128;
  static constexpr int kRows = 128;
  static constexpr int kKeys = plan::kBlockTokens;
  static constexpr int kThreads = 256;  // two warpgroups
  static constexpr int kQHalf = kRows * 128;   // bytes of one 64-column half of Q
  static constexpr int kKvHalf = kKeys * 128;  // bytes of one half of a K (or V) block
  static constexpr int kKvBytes = 2 * kKvHalf;
  static constexpr int kStages = 2;
  static constexpr int kSmemBytes = 2 * kQHalf + kStages * 2 * kKvBytes + 1024;  // + alignment slack
  static_assert(kKeys == 64, "the S tile is m64n64: 64-key pieces");
};

// Byte offset of 16-byte chunk c (0..15) of row r in a [2 halves][rows][128 B] swizzled array.
__device__ __forceinline__ int swizzled_offset(int r, int c, int half_bytes) {
  return (c >> 3) * half_bytes + r * 128 + (((c & 7) ^ (r & 7)) << 4);
}

template <class T>
__device__ __forceinline__ void wgmma_s(float (&d)[32], std::uint64_t a, std::uint64_t b, int accumulate = 1) {
#if HYDRAGEN_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) wgmma::wgmma_m64n64k16_ss_bf16(d, a, b, accumulate);
  else wgmma::wgmma_m64n64k16_ss_f16(d, a, b, accumulate);
#endif
}
template <class T>
__device__ __forceinline__ void wgmma_s128(float (&d)[64], std::uint64_t a, std::uint64_t b, int accumulate = 1) {
#if HYDRAGEN_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) wgmma::wgmma_m64n128k16_ss_bf16(d, a, b, accumulate);
  else wgmma::wgmma_m64n128k16_ss_f16(d, a, b, accumulate);
#endif
}
// S += Q K^T over d = 128 in 8 k-steps, for Keys (64 or 128) keys; not committed. q_addr: this
// warpgroup's 64 rows in a [2 halves][rows][128 B] swizzled array whose halves lie q_half bytes
// apart; k_addr: [2 halves][Keys][128 B], halves kv_half apart. Overwrite: S = Q K^T (the first
// k-step ignores s's old values, so s need not be zeroed first: v34).
template <class T, int Keys, bool Overwrite = false>
__device__ __forceinline__ void wgmma_qk(float (&s)[Keys / 2], std::uint32_t q_addr, int q_half, std::uint32_t k_addr,
                                         int kv_half) {
  const std::uint64_t qd = wgmma::desc(q_addr, 16, 1024), kd = wgmma::desc(k_addr, 16, 1024);
#pragma unroll
  for (int kk = 0; kk < 8; ++kk) {
    const std::uint64_t a = wgmma::desc_at(qd, (kk >> 2) * q_half + (kk & 3) * 32);
    const std::uint64_t b = wgmma::desc_at(kd, (kk >> 2) * kv_half + (kk & 3) * 32);
    const int accumulate = Overwrite && kk == 0 ? 0 : 1;
    if constexpr (Keys == 64) wgmma_s<T>(s, a, b, accumulate);
    else wgmma_s128<T>(s, a, b, accumulate);
  }
}
template <class T>
__device__ __forceinline__ void wgmma_o(float (&d)[64], const std::uint32_t (&a)[4], std::uint64_t b) {
#if HYDRAGEN_WGMMA
  if constexpr (std::is_same_v<T, __nv_bfloat16>) wgmma::wgmma_m64n128k16_rs_tb_bf16(d, a, b);
  else wgmma::wgmma_m64n128k16_rs_tb_f16(d, a, b);
#endif
}

// Rows [first, first + count) of an item's Q tile (d = 128) into a [2 halves][rows][128 B]
// swizzled array whose halves lie q_half bytes apart, by `threads` threads (this one is t);
// rows past the item's row_count are zero (their scores are finite; they are never written).
template <class T>
__device__ __forceinline__ void load_q_rows(const PagedAttentionParams& p, const plan::PlanItem& it, unsigned char* sq,
                                            int q_half, int first, int count, int t, int threads, int group_size) {
  for (int id = t; id < count * 16; id += threads) {
    const int r = first + id / 16, c = id % 16;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (r < it.row_count) {
      const plan::PlanRow row = p.rows[it.row_begin + r];
      const std::int64_t qi = std::int64_t{row.token} * p.q_heads + it.kv_head * group_size + row.group;
      val = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + qi * 128) + c);
    }
    *reinterpret_cast<uint4*>(sq + swizzled_offset(r, c, q_half)) = val;
  }
}

// Causal limits of this thread's two rows of an item's tile (r0 and r0 + 8; INT32_MAX past the
// item's rows); returns the smaller.
__device__ __forceinline__ int row_key_limits(const PagedAttentionParams& p, const plan::PlanItem& it, int r0,
                                              int (&limit)[2]) {
  for (int h = 0; h < 2; ++h)
    limit[h] = r0 + 8 * h < it.row_count ? p.rows[it.row_begin + r0 + 8 * h].key_limit : INT32_MAX;
  return min(limit[0], limit[1]);
}

// Partial entry of a row's state in an item's column.
__device__ __forceinline__ std::int64_t row_state_entry(const plan::PlanItem& it, const plan::PlanRow& row,
                                                        int group_size) {
  return row.state_base + std::int64_t{it.column} * row.state_stride + it.kv_head * group_size + row.group;
}

// Partial entries of the same two rows' states in the item's column (-1 past the item's rows;
// entries fit in 32 bits: build_attention_plan checks).
__device__ __forceinline__ void tile_state_entries(const PagedAttentionParams& p, const plan::PlanItem& it, int r0,
                                                   int group_size, int (&entry)[2]) {
  for (int h = 0; h < 2; ++h) {
    entry[h] = -1;
    if (r0 + 8 * h < it.row_count) {
      entry[h] = static_cast<int>(row_state_entry(it, p.rows[it.row_begin + r0 + 8 * h], group_size));
    }
  }
}

// One online-softmax step (exp2 domain, scale folded in) over a wgmma S accumulator of N
// columns: this thread holds rows r0 (h = 0) and r0 + 8 (h = 1), element i in row (i / 2) % 2,
// the rest of each row in its quad. s becomes the unnormalized probabilities, m and l move on,
// alpha is the factor for O. A row masked so far keeps exp2 finite (base 0).
// Lazy rescaling (see perf-notes: v24): the rows' maxima move only when some row of the
// warp sees a score more than `lag` (log2 units) above its max; until then the old max stays
// the base, so p <= 2^lag and O and l keep their scale (alpha = 1). The result is the same
// softmax (o / l and lse do not depend on the base); only the rounding of p moves. Returns
// whether this warp rescaled (warp-uniform): if not, the caller skips O *= alpha.
template <int N>
__device__ __forceinline__ bool online_softmax_step(float (&s)[N], float (&m)[2], float (&l)[2], float scale_log2,
                                                    float lag, float (&alpha)[2]) {
  float mx[2] = {-INFINITY, -INFINITY}, base[2];
#pragma unroll
  for (int i = 0; i < N; ++i) mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], s[i]);
  bool grow = false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
    mx[h] *= scale_log2;
    grow |= mx[h] > m[h] + lag;  // m = -inf: any finite score grows it
  }
  const bool rescale = __any_sync(0xffffffffu, grow);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (rescale) {
      const float mn = fmaxf(m[h], mx[h]);
      base[h] = mn == -INFINITY ? 0.f : mn;
      alpha[h] = ptx::exp2_approx(m[h] - base[h]);
      m[h] = mn;
      l[h] *= alpha[h];
    } else {
      base[h] = m[h] == -INFINITY ? 0.f : m[h];
      alpha[h] = 1.f;
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int h = (i / 2) % 2;
    s[i] = ptx::exp2_approx(fmaf(s[i], scale_log2, -base[h]));
    l[h] += s[i];
  }
  return rescale;
}

// The exponentials of a block without masked keys, betting that the rows keep their max (see perf-notes: v34):
// p = 2^(s * scale - m) at once, without the max's 64 comparisons, shuffles and vote first, and
// the thread's part of each row's sum in `sum`. Returns whether the bet held for this thread:
// each part sums to at most 2^lag (so no p is above 2^lag, the bound online_softmax_step keeps,
// and nothing overflowed) and both rows have a max. Where it holds for every thread of the
// warp, the caller adds `sum` to l (m stays, alpha would be 1); elsewhere s holds p, from
// which rescale_from_p moves the maxima (or, after an overflow, the caller computes S again).
template <int N>
__device__ __forceinline__ bool exp_at_same_max(float (&s)[N], const float (&m)[2], float scale_log2, float lag_pow2,
                                                float (&sum)[2]) {
  sum[0] = sum[1] = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int h = (i / 2) % 2;
    s[i] = ptx::exp2_approx(fmaf(s[i], scale_log2, -m[h]));
    sum[h] += s[i];
  }
  // (not "> lag_pow2": a NaN sum fails the bet too; m = -inf makes every sum inf or NaN)
  return sum[0] <= lag_pow2 && sum[1] <= lag_pow2;
}

// Where some thread of the warp lost exp_at_same_max's bet, the warp moves its rows' maxima
// from p itself (see perf-notes: v35), without computing S again: s holds p = 2^(s * scale - m). A row whose
// largest p (over its quad) is above 2^lag moves its max up by e, where 2^(e-1) <= pmax < 2^e:
// its p, l and O scale by 2^-e, exactly (a power of two), so its largest p lands in [1/2, 1)
// and every p keeps online_softmax_step's bound. l takes the block's scaled sum; alpha says how
// O scales (1 for a row that keeps its max). Returns false, changing nothing, where some p of
// the warp is too large to scale (2^120 or more: an overflow, or no max yet): its score is lost
// and the caller computes S again.
template <int N>
__device__ __forceinline__ bool rescale_from_p(float (&s)[N], float (&m)[2], float (&l)[2], float lag_pow2,
                                               float (&alpha)[2]) {
  float mx[2] = {0.f, 0.f};  // (fmaxf drops a NaN p; its row's l stays NaN, as online_softmax_step's)
#pragma unroll
  for (int i = 0; i < N; ++i) mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], s[i]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
  }
  if (__any_sync(0xffffffffu, !(mx[0] < 0x1p120f && mx[1] < 0x1p120f))) return false;
  float sum[2] = {0.f, 0.f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    alpha[h] = 1.f;
    if (mx[h] > lag_pow2) {
      const int e = ((__float_as_int(mx[h]) >> 23) & 0xff) - 126;  // 1 <= e <= 120 (lag >= 0)
      alpha[h] = __int_as_float((127 - e) << 23);
      m[h] += static_cast<float>(e);
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int h = (i / 2) % 2;
    s[i] *= alpha[h];
    sum[h] += s[i];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) l[h] = fmaf(l[h], alpha[h], sum[h]);
  return true;
}

// S = Q K^T of one warp's 16 rows and 128 keys (d = 128) by mma.sync, into the layout of its
// part of a wgmma m64n128 accumulator (element 4 nt + e: key 8 nt + 2 (lane % 4) + (e & 1), row
// lane / 4 + 8 (e / 2)). q: a [2 halves][rows][128 B] swizzled array whose halves lie q_half
// bytes apart, the warp's rows from q_row on; k: [2 halves][128 keys][128 B], kv_half apart.
// The warp's slow path where rescale_from_p cannot recover its scores (see perf-notes: v35).
template <class T>
__device__ __forceinline__ void warp_qk(float (&s)[64], const unsigned char* q, int q_row, int q_half,
                                        const unsigned char* k, int kv_half, int lane) {
#pragma unroll
  for (int i = 0; i < 64; ++i) s[i] = 0.f;
  const int mi = lane / 8, mr = lane % 8;  // ldmatrix: this lane's matrix and its row in it
#pragma unroll 1
  for (int kk = 0; kk < 8; ++kk) {  // 16 dims: chunks 2 kk and 2 kk + 1 (a loop: few registers)
    std::uint32_t a[4];             // rows 0-7 / 8-15 (mi % 2) of chunk 2 kk + mi / 2
    ptx::ldmatrix_x4(a, q + swizzled_offset(q_row + (mi % 2) * 8 + mr, 2 * kk + mi / 2, q_half));
#pragma unroll
    for (int np = 0; np < 8; ++np) {  // keys 16 np ..: b[0], b[1] of keys 16 np + 0..7, b[2], b[3] of + 8..15
      std::uint32_t b[4];
      ptx::ldmatrix_x4(b, k + swizzled_offset(16 * np + (mi / 2) * 8 + mr, 2 * kk + mi % 2, kv_half));
      ptx::mma_16816<T>(*reinterpret_cast<float(*)[4]>(&s[8 * np]), a, b[0], b[1]);
      ptx::mma_16816<T>(*reinterpret_cast<float(*)[4]>(&s[8 * np + 4]), a, b[2], b[3]);
    }
  }
}

// Row h's (o / l, lse) of this thread's two rows of the tile (r0 + 8 h) straight from the
// m64n128 accumulator registers to partial entry `entry` (-1: past the item's rows, nothing);
// l is the thread's partial row sum (its quad holds the rest). head_dim 128.
__device__ __forceinline__ void write_row_state(const PagedAttentionParams& p, std::int64_t entry, const float (&o)[64],
                                                const float (&m)[2], float (&l)[2], int h, int lane) {
  constexpr int D = 128;
  l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
  l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
  if (entry < 0) return;
  const float inv = l[h] > 0.f ? 1.f / l[h] : 0.f;
  float* dst = p.states.o + entry * D + (lane % 4) * 2;
#pragma unroll
  for (int i = 0; i < 16; ++i)
    *reinterpret_cast<float2*>(dst + i * 8) = make_float2(o[i * 4 + 2 * h] * inv, o[i * 4 + 2 * h + 1] * inv);
  if (lane % 4 == 0) p.states.lse[entry] = l[h] > 0.f ? (m[h] + __log2f(l[h])) * 0.69314718056f : -INFINITY;
}

// The item's (o / l, lse) of this thread's two rows into their partial entries (`entry`, as
// tile_state_entries gives them).
__device__ __forceinline__ void write_tile_states(const PagedAttentionParams& p, const int (&entry)[2],
                                                  const float (&o)[64], const float (&m)[2], float (&l)[2],
                                                  int lane) {
#pragma unroll
  for (int h = 0; h < 2; ++h) write_row_state(p, entry[h], o, m, l, h, lane);
}

// The same, each row's entry read here (fewer registers live through the item's loop).
__device__ __forceinline__ void write_tile_states(const PagedAttentionParams& p, const plan::PlanItem& it,
                                                  const float (&o)[64], const float (&m)[2], float (&l)[2], int r0,
                                                  int lane, int group_size) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    std::int64_t entry = -1;
    if (r0 + 8 * h < it.row_count) {
      const plan::PlanRow row = p.rows[it.row_begin + r0 + 8 * h];
      entry = row_state_entry(it, row, group_size);
    }
    write_row_state(p, entry, o, m, l, h, lane);
  }
}

// Host side of a shared-segment kernel: raise its shared-memory limit once; resident blocks per
// SM, or 0 when this build or device has no sm_90a code for it (the caller falls back).
template <class Kernel>
int prepare_sm90_kernel(Kernel kernel, int threads, int smem_bytes) {
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess || attr.binaryVersion != 90) {
    cudaGetLastError();
    return 0;
  }
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem_bytes) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return blocks;
}

template <class T>
__global__ void __launch_bounds__(256, 2) shared_attention_wgmma_kernel(const PagedAttentionParams p) {
#if HYDRAGEN_WGMMA
  using Tile = WgmmaSharedTile<T>;
  constexpr int D = Tile::D;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  unsigned char* smem = smem_raw + ((1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023);
  unsigned char* sq = smem;
  unsigned char* skv = smem + 2 * Tile::kQHalf;  // stage s: K at s * 2 * kKvBytes, V after it
  const std::uint32_t sq_addr = ptx::smem_addr(sq), skv_addr = ptx::smem_addr(skv);

  allow_dependent_launch();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4;
  const int group_size = p.q_heads / p.kv_heads;
  const int item_count = *p.item_count;
  const T* kp = static_cast<const T*>(p.k_pool);
  const T* vp = static_cast<const T*>(p.v_pool);
  const int r0 = wg * 64 + (warp % 4) * 16 + lane / 4;  // this thread's rows: r0 and r0 + 8

  for (int item_index = blockIdx.x; item_index < item_count; item_index += gridDim.x) {
    const plan::PlanItem it = p.items[item_index];
    load_q_rows<T>(p, it, sq, Tile::kQHalf, 0, Tile::kRows, tid, Tile::kThreads, group_size);
    // A piece's copies in two steps: fetch() reads the page table into slot[] (the pool token
    // slot of each of this thread's keys, -1 past the piece: global loads, no shared memory),
    // issue() starts the cp.async copies into a stage. Token slots fit in 32 bits (a pool of
    // 2^31 tokens would hold 2^31 * Hkv * 128 * 2 bytes per K).
    constexpr int kPerThread = Tile::kKeys * 16 / Tile::kThreads;
    int slot[kPerThread];
    auto fetch = [&](int pi) {
      const plan::PlanPiece piece = p.pieces[it.piece_begin + pi];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int key = (tid + i * Tile::kThreads) / 16;
        const int tok = piece.token_begin + key;
        slot[i] = key < piece.tokens ? pool_slot(p, piece, tok) : -1;
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
    const int min_limit = row_key_limits(p, it, r0, limit);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    float o[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] = 0.f;

    for (int pi = 0; pi < it.piece_count; ++pi) {
      const plan::PlanPiece piece = p.pieces[it.piece_begin + pi];
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
      wgmma_qk<T, 64>(s, sq_addr + wg * 64 * 128, Tile::kQHalf, k_addr, Tile::kKvHalf);
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
      float alpha[2];
      // o is not in flight here: P.V(pi - 1) was waited for before the barrier. (Always
      // rescaled, by 1 where the max stayed: skipping it spilled registers here.)
      online_softmax_step(s, m, l, p.scale_log2, p.rescale_lag, alpha);
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

    write_tile_states(p, it, o, m, l, r0, lane, group_size);
    __syncthreads();  // shared memory (Q, stages) is reused by the next item
  }
#endif
}

}  // namespace hydragen::cuda
