// Block-wide building blocks of the device sampler (sampling.cu), one block of kThreads per
// row: warp and block reductions, an exclusive scan in thread order, the row's raw logits
// streamed with loads in flight, and the radix select that finds an order statistic of a
// row (the k-th largest value, or the value where a weight such as probability mass reaches
// a target) in 4 passes of 8 bits over the float bits, a 256-bin histogram in shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace hydragen::cuda::sampling {

inline constexpr int kThreads = 1024;
inline constexpr int kWarps = kThreads / 32;
static_assert(kWarps == 32, "block_reduce reduces one value per warp with one warp");
inline constexpr unsigned kFullMask = 0xffffffffu;
inline constexpr int kDrawItems = 4;               // contiguous elements per thread in an index-order tile
inline constexpr int kTile = kThreads * kDrawItems;  // elements per index-order tile

// Unsigned order = float order for non-NaN values (-0 sorts below +0; scaled logits hold no -0).
__device__ inline std::uint32_t order_key(float x) {
  const std::uint32_t bits = __float_as_uint(x);
  return (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
}
__device__ inline float key_value(std::uint32_t key) {
  return __uint_as_float((key & 0x80000000u) != 0u ? (key & 0x7fffffffu) : ~key);
}

// Calls visit(i, raw[i]) for the elements of the row this thread owns, in increasing i,
// with kLoads loads in flight (16-byte ones when the row is 16-byte aligned).
template <class Visit>
__device__ inline void for_each_raw(const float* raw, int vocab, Visit visit) {
  constexpr int kLoads = 4;
  if (vocab % 4 == 0 && reinterpret_cast<std::uintptr_t>(raw) % 16 == 0) {
    const float4* raw4 = reinterpret_cast<const float4*>(raw);
    const int quads = vocab / 4;
    for (int base = threadIdx.x; base < quads; base += kThreads * kLoads) {
      float4 q[kLoads];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        if (base + u * kThreads < quads) q[u] = __ldg(raw4 + base + u * kThreads);
      }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int j = base + u * kThreads;
        if (j >= quads) break;
        visit(4 * j, q[u].x);
        visit(4 * j + 1, q[u].y);
        visit(4 * j + 2, q[u].z);
        visit(4 * j + 3, q[u].w);
      }
    }
    return;
  }
  for (int base = threadIdx.x; base < vocab; base += kThreads * kLoads) {
    float q[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (base + u * kThreads < vocab) q[u] = __ldg(raw + base + u * kThreads);
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (base + u * kThreads >= vocab) break;
      visit(base + u * kThreads, q[u]);
    }
  }
}

// ---- block-wide reductions and scans ---------------------------------------------------

// Max of the raw logits, its first index, and sum exp(l - max): an online softmax state.
struct RowStats {
  float max;
  int argmax;
  float sum;
};
__device__ inline RowStats merge(RowStats a, RowStats b) {
  if (b.max > a.max || (b.max == a.max && b.argmax < a.argmax)) {
    const RowStats t = a;
    a = b;
    b = t;
  }
  if (b.sum > 0.f) a.sum += b.sum * expf(b.max - a.max);
  return a;
}

__device__ inline float shfl_xor(float v, int offset) { return __shfl_xor_sync(kFullMask, v, offset); }
__device__ inline int shfl_xor(int v, int offset) { return __shfl_xor_sync(kFullMask, v, offset); }
__device__ inline unsigned long long shfl_xor(unsigned long long v, int offset) {
  return __shfl_xor_sync(kFullMask, v, offset);
}
__device__ inline RowStats shfl_xor(RowStats v, int offset) {
  return {shfl_xor(v.max, offset), shfl_xor(v.argmax, offset), shfl_xor(v.sum, offset)};
}

struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Min {
  __device__ int operator()(int a, int b) const { return a < b ? a : b; }
};
struct Max {
  __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};
struct Merge {
  __device__ RowStats operator()(RowStats a, RowStats b) const { return merge(a, b); }
};

// op over the whole block; every thread gets the result. Ends with a barrier, so the
// scratch (one per T) is free for the next call.
template <class T, class Op>
__device__ inline T block_reduce(T value, Op op) {
  __shared__ T warp_values[kWarps];
  for (int offset = 16; offset > 0; offset /= 2) value = op(value, shfl_xor(value, offset));
  if (threadIdx.x % 32 == 0) warp_values[threadIdx.x / 32] = value;
  __syncthreads();
  value = warp_values[threadIdx.x % 32];
  for (int offset = 16; offset > 0; offset /= 2) value = op(value, shfl_xor(value, offset));
  __syncthreads();
  return value;
}

// Sum of `value` over the threads before this one (thread order); `total` = the block's sum.
template <class T>
__device__ inline T block_exclusive_sum(T value, T& total) {
  __shared__ T warp_totals[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T inclusive = value;
  for (int offset = 1; offset < 32; offset *= 2) {
    const T t = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += t;
  }
  T exclusive = __shfl_up_sync(kFullMask, inclusive, 1);
  if (lane == 0) exclusive = T(0);
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  T warps_inclusive = warp_totals[lane];
  for (int offset = 1; offset < 32; offset *= 2) {
    const T t = __shfl_up_sync(kFullMask, warps_inclusive, offset);
    if (lane >= offset) warps_inclusive += t;
  }
  T warps_exclusive = __shfl_up_sync(kFullMask, warps_inclusive, 1);
  if (lane == 0) warps_exclusive = T(0);
  total = __shfl_sync(kFullMask, warps_inclusive, 31);
  const T before_warp = __shfl_sync(kFullMask, warps_exclusive, warp);
  __syncthreads();
  return before_warp + exclusive;
}

// ---- radix select ----------------------------------------------------------------------

template <class W>
struct SelectScratch {
  W bins[256];
  W above;             // the walk's result: weight of the keys above the chosen digit
  std::uint32_t digit;  // the walk's result: the chosen digit
};

// Probability mass in fixed point, p * 2^32 rounded: integer sums do not depend on the order
// of the atomics, so a row's top-p cut is the same on every run (float atomics would not be).
// A row sums to at most vocab * 2^32 < 2^62; p below 2^-33 of the max counts as 0.
using Mass = unsigned long long;
__device__ inline Mass to_mass(float p) { return __float2ull_rn(p * 4294967296.f); }

// Element weights: every element counts 1 (top-k), or p = exp(x - m) over x >= tau (top-p).
struct CountAll {
  __device__ int operator()(float) const { return 1; }
};
struct KeptMass {
  float tau, m;
  __device__ Mass operator()(float v) const { return v >= tau ? to_mass(expf(v - m)) : 0ull; }
};

// Counts: one atomic per distinct digit of the warp (the top digits of nearby logits collide).
__device__ inline void add_to_bin(int* bins, std::uint32_t digit, int weight) {
  if (!__any_sync(kFullMask, digit < 256u)) return;
  const unsigned same = __match_any_sync(kFullMask, digit);
  if (digit < 256u && static_cast<int>(threadIdx.x % 32) == __ffs(same) - 1) {
    atomicAdd(&bins[digit], weight * __popc(same));
  }
}
// Masses: when the warp's elements fall in few digits (the first pass over a whole row), one
// warp sum and one atomic per digit; otherwise one atomic per element.
__device__ inline void add_to_bin(Mass* bins, std::uint32_t digit, Mass weight) {
  if (!__any_sync(kFullMask, digit < 256u)) return;
  const unsigned same = __match_any_sync(kFullMask, digit);
  const int lane = threadIdx.x % 32;
  const unsigned leaders = __ballot_sync(kFullMask, digit < 256u && lane == __ffs(same) - 1);
  if (__popc(leaders) > 4) {
    if (digit < 256u) atomicAdd(&bins[digit], weight);
    return;
  }
  for (unsigned rest = leaders; rest != 0u; rest &= rest - 1u) {
    const int leader = __ffs(rest) - 1;
    const unsigned group = __shfl_sync(kFullMask, same, leader);
    Mass sum = (group >> lane) & 1u ? weight : 0ull;
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(kFullMask, sum, offset);
    if (lane == leader) atomicAdd(&bins[digit], sum);
  }
}

// Warp 0: walks the digits from 255 down, accumulating weight after `above`, and stores the
// first non-empty digit at which the total reaches `target` (if it never does, the lowest
// non-empty digit: keep everything). Lane l holds digits 255-8l..248-8l.
template <class W>
__device__ inline void walk_digits(SelectScratch<W>& s, W above, W target) {
  const int lane = threadIdx.x;
  W bins[8];
  W lane_sum = 0;
  for (int j = 0; j < 8; ++j) {
    bins[j] = s.bins[255 - 8 * lane - j];
    lane_sum += bins[j];
  }
  W inclusive = lane_sum;
  for (int offset = 1; offset < 32; offset *= 2) {
    const W t = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += t;
  }
  W running = __shfl_up_sync(kFullMask, inclusive, 1);
  running = above + (lane == 0 ? W(0) : running);
  int hit = -1, last = -1;
  W hit_above = 0, last_above = 0;
  for (int j = 0; j < 8; ++j) {
    if (bins[j] > W(0)) {
      if (hit < 0 && running + bins[j] >= target) {
        hit = j;
        hit_above = running;
      }
      last = j;
      last_above = running;
    }
    running += bins[j];
  }
  const unsigned hits = __ballot_sync(kFullMask, hit >= 0);
  const unsigned nonempty = __ballot_sync(kFullMask, last >= 0);
  if (hits != 0u) {
    if (lane == __ffs(hits) - 1) {
      s.digit = static_cast<std::uint32_t>(255 - 8 * lane - hit);
      s.above = hit_above;
    }
  } else if (nonempty != 0u) {
    if (lane == 31 - __clz(nonempty)) {
      s.digit = static_cast<std::uint32_t>(255 - 8 * lane - last);
      s.above = last_above;
    }
  } else if (lane == 0) {  // nothing to select from: cannot happen for a valid call
    s.digit = 0u;
    s.above = above;
  }
}

// The largest threshold t (a value of x) such that the weight of the elements with x >= t
// reaches `target`; only elements of positive weight take part. With CountAll and target k:
// the k-th largest x.
template <class W, class Row, class Weight>
__device__ inline float select_threshold(const Row& x, int vocab, W target, Weight weight, SelectScratch<W>& s) {
  std::uint32_t prefix = 0u, mask = 0u;
  W above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (threadIdx.x < 256) s.bins[threadIdx.x] = W(0);
    __syncthreads();
    for (int base = 0; base < vocab; base += kThreads) {  // uniform trip count: whole warps
      const int i = base + static_cast<int>(threadIdx.x);
      std::uint32_t digit = 256u;  // none
      W w = 0;
      if (i < vocab) {
        const float v = x[i];
        const std::uint32_t key = order_key(v);
        w = weight(v);
        if (w > W(0) && (key & mask) == prefix) digit = (key >> shift) & 255u;
      }
      add_to_bin(s.bins, digit, w);
    }
    __syncthreads();
    if (threadIdx.x < 32) walk_digits(s, above, target);
    __syncthreads();
    prefix |= s.digit << shift;
    mask |= 255u << shift;
    above = s.above;
    // s is next written after the next pass's barrier, when every thread has read it.
  }
  return key_value(prefix);
}

}  // namespace hydragen::cuda::sampling
