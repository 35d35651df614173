// What the decode kernels (decode_attention.cuh, decode_quad.cuh) share: the decode kernel's
// shape and shared-memory layout, the unpacking of bf16/fp16 words, and one row's online
// softmax step over a chunk.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backend/cuda/mma.cuh"
#include "backend/cuda/paged_attention_runner.h"  // kInLinePairs

namespace hydragen::cuda {

template <class T, int D>
struct DecodeShape {
  static constexpr int kRows = 8;        // rows per item (PlanOptions::suffix_tile_rows <= this)
  static constexpr int kWarps = 4;       // items per block
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kChunk = 32;      // keys per step (one per lane)
  static constexpr int kKeyLoads = D / 8;  // 16-byte loads per K row
  static constexpr int kDims = D / 32;     // output dims per lane
  static constexpr int kRowLanes = D * static_cast<int>(sizeof(T)) / 16;  // lanes per 16-byte-chunked row
  // A chunk's K and V rows in shared memory, D apart, unpadded, their 16-byte chunks permuted:
  // chunk c of row r sits at chunk c ^ (r & 7). So each 128-byte run of global memory a row's
  // copy writes lands in one aligned 128-byte span, while the 8 rows that 8 lanes read at one
  // chunk (the scalar scores, the mma path's ldmatrix) still sit in 8 different bank groups;
  // padded rows would split each run across two spans (see perf-notes: Decode stage layout).
  // The scalar path's V rows stay plain (a warp reads one whole row per key).
  // D = 96 has 12 chunks: the first 8 permute as above, the last 4 among themselves by row & 3.
  static __device__ __forceinline__ int swizzled(int row, int chunk) {
    if constexpr (D % 64 == 0) return row * D + ((chunk ^ (row & 7)) << 3);
    else return row * D + ((chunk < 8 ? chunk ^ (row & 7) : 8 + ((chunk - 8) ^ (row & 3))) << 3);
  }
  // The chunk's K rows [kChunk][D] and V rows [kChunk][D] (T), in floats: also the scratch of
  // the last arrival's merge once the key loop is done (items of >= 2 rows: the multi-row builds
  // only).
  static constexpr int kStageFloats = 2 * kChunk * D * static_cast<int>(sizeof(T)) / 4;
  // The mma path (items of 3-8 rows): P of a chunk as two T parts, hi and lo, each [8 rows]
  // [kPRow], in the Q slice (unused on that path).
  static constexpr int kPRow = kChunk + 8;
  // A warp's shared memory for items of <= max_rows rows: Q [max_rows][D] fp32, p
  // [max_rows][kChunk] fp32, then the K/V stage.
  static constexpr int warp_smem_floats(int max_rows) { return max_rows * D + max_rows * kChunk + kStageFloats; }
  // The rows a kernel build's shared memory is laid out for (its Rows: 0 general, else its one
  // path): the mma path's fragments span 8 rows whatever its items hold (P's parts, O^T written
  // back), so only the one-row build is smaller.
  static constexpr int layout_rows(int rows) { return rows == 1 ? 1 : 8; }
  static constexpr int smem_bytes(int max_rows) { return kWarps * warp_smem_floats(max_rows) * 4; }
  static_assert(D == 64 || D == 96 || D == 128);
  static_assert(sizeof(T) == 2, "swizzled: 8 elements per 16-byte chunk");
  // Every warp's slice and its K and V stages start on a 128-byte boundary (the swizzle's spans).
  static_assert(warp_smem_floats(1) % 32 == 0 && warp_smem_floats(8) % 32 == 0, "warp slices 128-byte aligned");
  static_assert((D + kChunk) % 32 == 0 && kChunk * D * sizeof(T) % 128 == 0, "K and V stages 128-byte aligned");
  // The in-line merges stage the other columns' o in the K rows (free after the key loop).
  static_assert(kInLinePairs * D * 4 <= kChunk * D * static_cast<int>(sizeof(T)), "merge_rows_in_line's stage fits sk");
  static_assert(8 * D * 4 <= kChunk * D * static_cast<int>(sizeof(T)), "merge_row_in_registers' stage fits sk");
  static_assert(2 * 8 * kPRow * static_cast<int>(sizeof(T)) <= 8 * D * 4, "P's two parts fit the Q slice of an 8-row warp");
};

template <class T>
__device__ __forceinline__ void unpack8(const uint4& u, float (&f)[8]) {
  const std::uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    } else {
      const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
      f[2 * i] = x.x, f[2 * i + 1] = x.y;
    }
  }
}

template <class T>
__device__ __forceinline__ float2 unpack2(std::uint32_t w) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
  } else {
    return __half22float2(*reinterpret_cast<const __half2*>(&w));
  }
}

// A lane's DL dims of one V row: 8 bytes for D = 128, 4 for D = 64 (D = 96's 6 bytes are read
// as three elements: load_lane_dims).
template <int DL>
using VWord = std::conditional_t<DL == 4, uint2, std::uint32_t>;

template <class T, int DL>
__device__ __forceinline__ void unpack_v(const VWord<DL>& u, float (&v)[DL]) {
  if constexpr (DL == 4) {
    const float2 a = unpack2<T>(u.x), b = unpack2<T>(u.y);
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
  } else {
    const float2 a = unpack2<T>(u);
    v[0] = a.x, v[1] = a.y;
  }
}

// v = the DL (2, 3 or 4) dims of T at `at` as fp32: one 4- or 8-byte load, or three 2-byte ones.
template <class T, int DL>
__device__ __forceinline__ void load_lane_dims(const T* at, float (&v)[DL]) {
  if constexpr (DL == 3) {
#pragma unroll
    for (int i = 0; i < 3; ++i) v[i] = ptx::to_float<T>(at[i]);
  } else {
    unpack_v<T, DL>(*reinterpret_cast<const VWord<DL>*>(at), v);
  }
}

// o = DL fp32 values of a state row at `at` (__ldcg: written by another block of this launch
// or the one before): one 16- or 8-byte load, or three 4-byte ones.
template <int DL>
__device__ __forceinline__ void load_state_dims(const float* at, float (&o)[DL]) {
  if constexpr (DL == 4) {
    const float4 v = __ldcg(reinterpret_cast<const float4*>(at));
    o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
  } else if constexpr (DL == 2) {
    const float2 v = __ldcg(reinterpret_cast<const float2*>(at));
    o[0] = v.x, o[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < DL; ++i) o[i] = __ldcg(at + i);
  }
}

// s + q . k over 8 dims, in order (q: fp32 rows in shared memory).
__device__ __forceinline__ float dot8(const float* q, const float (&k)[8], float s) {
  const float4 q0 = *reinterpret_cast<const float4*>(q);
  const float4 q1 = *reinterpret_cast<const float4*>(q + 4);
  s = fmaf(q0.x, k[0], s);
  s = fmaf(q0.y, k[1], s);
  s = fmaf(q0.z, k[2], s);
  s = fmaf(q0.w, k[3], s);
  s = fmaf(q1.x, k[4], s);
  s = fmaf(q1.y, k[5], s);
  s = fmaf(q1.z, k[6], s);
  s = fmaf(q1.w, k[7], s);
  return s;
}

// One row's online-softmax step over a chunk (exp2 domain): the chunk's max over the warp,
// m, l and acc rescaled; returns this lane's probability. A row masked so far keeps exp2
// finite (base 0).
template <int DL>
__device__ __forceinline__ float softmax_step(float s, float& m, float& l, float (&acc)[DL]) {
  float mx = s;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  const float mn = fmaxf(m, mx);
  const float base = mn == -INFINITY ? 0.f : mn;
  const float alpha = ptx::exp2_approx(m - base);
  m = mn;
  const float pr = ptx::exp2_approx(s - base);
  l = l * alpha + pr;
#pragma unroll
  for (int i = 0; i < DL; ++i) acc[i] *= alpha;
  return pr;
}

}  // namespace hydragen::cuda
