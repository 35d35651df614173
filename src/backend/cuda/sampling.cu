// Token sampling on the device, one block of 1024 threads per row; the algorithm is the one
// written down in src/sample/sampling.h, and the CPU twin there is its spec.
//
// Passes over a sampled row (greedy rows stop after the first):
//   1. raw logits (16-byte loads, 4 in flight per thread): max, first argmax, sum exp(l - max)
//      (online) -> logprob; the scaled row x = l / T is kept in shared memory when it fits
//      (else every later pass re-reads the raw row from global memory / L2).
//   2. top-k: radix select of the k-th largest x: 4 passes of 8 bits over order_key(x)
//      (float bits mapped to unsigned order), a 256-bin histogram in shared memory.
//   3. count and mass Z_a of the kept set x >= tau_a (skipped when nothing is cut: plain
//      temperature sampling keeps every element). With top-p and more than kCandidates
//      kept, the kCandidates largest are selected the same way; if they hold top_p * Z_a the
//      nucleus lies among them. The kept set (or that nucleus superset), when it has at most
//      kCandidates elements, is compacted in index order into shared memory, and the rest
//      runs on that short list instead of the row:
//   4. top-p: the same radix select with p_i as the weight: the largest key K with
//      sum_{x >= K} p >= top_p * Z_a.
//   5. Z over x >= tau, then the index-order draw: tiles of 4 contiguous elements per
//      thread, a block exclusive scan; the first index whose running sum exceeds u * Z. Rows
//      of 2..kMaxTiles tiles sum every tile in one pass first (draw_by_tiles) and scan only
//      from the tile where the running sum crosses u * Z.
// No sort, no global scratch: thresholds come out exact (order statistics over float bits),
// only the sums run in another order than on the CPU. No float atomics either (top-p masses
// are summed in fixed point), so a row gives the same result on every run.
#include "backend/cuda/sampling.h"

#include <cuda_runtime.h>

#include <climits>
#include <mutex>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "hydragen/error.h"
#include "sample/sampling.h"

namespace hydragen::cuda {

namespace {

using sample::SamplingParams;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
static_assert(kWarps == 32, "block_reduce reduces one value per warp with one warp");
constexpr int kDrawItems = 4;  // contiguous elements per thread in a draw or compaction tile
constexpr int kTile = kThreads * kDrawItems;         // elements per draw tile
constexpr int kCandidates = kTile;                   // the short list's capacity: one tile
constexpr int kMaxTiles = 2 * kWarps;  // rows of up to 262,144 elements draw by tile totals
constexpr unsigned kFullMask = 0xffffffffu;

// Unsigned order = float order for non-NaN values (-0 sorts below +0; scaled logits hold no -0).
__device__ std::uint32_t order_key(float x) {
  const std::uint32_t bits = __float_as_uint(x);
  return (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
}
__device__ float key_value(std::uint32_t key) {
  return __uint_as_float((key & 0x80000000u) != 0u ? (key & 0x7fffffffu) : ~key);
}

// Row `blockIdx.x` of the scaled logits x = l / T: the shared-memory copy, or recomputed from
// the raw row when it does not fit shared memory.
template <bool kCached>
struct ScaledRow {
  const float* raw;
  const float* cached;
  float temperature;
  __device__ float operator[](int i) const {
    if constexpr (kCached) {
      return cached[i];
    } else {
      return sample::scaled_logit(raw[i], temperature);
    }
  }
};

// The kept set (or a superset of the nucleus), compacted in index order.
struct CandidateList {
  float values[kCandidates];
  int indices[kCandidates];
};
struct ListRow {
  const float* values;
  __device__ float operator[](int i) const { return values[i]; }
};

// Calls visit(i, raw[i]) for the elements of the row this thread owns, in increasing i,
// with kLoads loads in flight (16-byte ones when the row is 16-byte aligned).
template <class Visit>
__device__ void for_each_raw(const float* raw, int vocab, Visit visit) {
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
__device__ RowStats merge(RowStats a, RowStats b) {
  if (b.max > a.max || (b.max == a.max && b.argmax < a.argmax)) {
    const RowStats t = a;
    a = b;
    b = t;
  }
  if (b.sum > 0.f) a.sum += b.sum * expf(b.max - a.max);
  return a;
}

__device__ float shfl_xor(float v, int offset) { return __shfl_xor_sync(kFullMask, v, offset); }
__device__ int shfl_xor(int v, int offset) { return __shfl_xor_sync(kFullMask, v, offset); }
__device__ unsigned long long shfl_xor(unsigned long long v, int offset) {
  return __shfl_xor_sync(kFullMask, v, offset);
}
__device__ RowStats shfl_xor(RowStats v, int offset) {
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
__device__ T block_reduce(T value, Op op) {
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
__device__ T block_exclusive_sum(T value, T& total) {
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
__device__ Mass to_mass(float p) { return __float2ull_rn(p * 4294967296.f); }

// Element weights: every element counts 1 (top-k), or p = exp(x - m) over x >= tau (top-p).
struct CountAll {
  __device__ int operator()(float) const { return 1; }
};
struct KeptMass {
  float tau, m;
  __device__ Mass operator()(float v) const { return v >= tau ? to_mass(expf(v - m)) : 0ull; }
};

// Counts: one atomic per distinct digit of the warp (the top digits of nearby logits collide).
__device__ void add_to_bin(int* bins, std::uint32_t digit, int weight) {
  if (!__any_sync(kFullMask, digit < 256u)) return;
  const unsigned same = __match_any_sync(kFullMask, digit);
  if (digit < 256u && static_cast<int>(threadIdx.x % 32) == __ffs(same) - 1) {
    atomicAdd(&bins[digit], weight * __popc(same));
  }
}
// Masses: when the warp's elements fall in few digits (the first pass over a whole row), one
// warp sum and one atomic per digit; otherwise one atomic per element.
__device__ void add_to_bin(Mass* bins, std::uint32_t digit, Mass weight) {
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
__device__ void walk_digits(SelectScratch<W>& s, W above, W target) {
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
__device__ float select_threshold(const Row& x, int vocab, W target, Weight weight, SelectScratch<W>& s) {
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

// ---- the draw ------------------------------------------------------------------------------

// The first index whose running sum of kept p (index order) exceeds target; -1 if none does.
// The walk starts at tile `first_tile` (kTile elements each) with `carry`, the kept p before it.
template <class Row>
__device__ int draw_token(const Row& x, int vocab, float tau, float m, float target, int first_tile = 0,
                          float carry = 0.f) {
  for (int base = first_tile * kTile; base < vocab; base += kTile) {
    const int first = base + static_cast<int>(threadIdx.x) * kDrawItems;
    float p[kDrawItems];
    float sum = 0.f;
    for (int j = 0; j < kDrawItems; ++j) {
      const int i = first + j;
      p[j] = 0.f;
      if (i < vocab) {
        const float v = x[i];
        if (v >= tau) p[j] = expf(v - m);
      }
      sum += p[j];
    }
    float tile_total = 0.f;
    float running = carry + block_exclusive_sum(sum, tile_total);
    int found = INT_MAX;
    for (int j = 0; j < kDrawItems; ++j) {
      running += p[j];
      if (p[j] > 0.f && running > target) {
        found = first + j;
        break;
      }
    }
    found = block_reduce(found, Min{});
    if (found != INT_MAX) return found;
    carry += tile_total;
  }
  return -1;
}

// Tile totals of the kept p, and where the draw's running sum crosses its target.
struct DrawScratch {
  float total[kMaxTiles];
  int tile;
  float carry, target;
};

// Z and the draw in two passes over a row of kTile < n <= kMaxTiles * kTile elements, where
// sample_kept's Z pass and draw_token's walk from tile 0 took one block scan per tile until
// the crossing (llama-3-8b's 128K-entry rows: 16 scans on average, one after another). Warp w
// sums the kept p of tiles w and w + 32 (thread slots in draw_token's order, lane-strided); one
// warp adds the totals in tile order into Z and finds the tile where carry + total first
// exceeds u * Z; draw_token scans that tile (and the next ones, should its own running sum stay
// below the target by rounding). The fallback, the last kept p > 0, is found in the same pass.
template <class Row>
__device__ int draw_by_tiles(const Row& x, int n, float tau, float m, float u, DrawScratch& s) {
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int tiles = (n + kTile - 1) / kTile;
  int last_kept = -1;
  for (int t = warp; t < tiles; t += kWarps) {
    float sum = 0.f;
    for (int slot = lane; slot < kThreads; slot += 32) {
      const int first = t * kTile + slot * kDrawItems;
#pragma unroll
      for (int j = 0; j < kDrawItems; ++j) {
        const int i = first + j;
        if (i >= n) break;
        const float v = x[i];
        if (v < tau) continue;
        const float w = expf(v - m);
        sum += w;
        if (w > 0.f) last_kept = i;
      }
    }
    for (int offset = 16; offset > 0; offset /= 2) sum += shfl_xor(sum, offset);
    if (lane == 0) s.total[t] = sum;
  }
  last_kept = block_reduce(last_kept, Max{});  // its barriers publish s.total
  if (warp == 0) {
    const float a = lane < tiles ? s.total[lane] : 0.f, b = lane + 32 < tiles ? s.total[lane + 32] : 0.f;
    // Inclusive prefix sums in tile order: of a over lanes, then of b after all of a.
    float ia = a, ib = b;
    for (int offset = 1; offset < 32; offset *= 2) {
      const float ta = __shfl_up_sync(kFullMask, ia, offset), tb = __shfl_up_sync(kFullMask, ib, offset);
      if (lane >= offset) ia += ta, ib += tb;
    }
    const float total_a = __shfl_sync(kFullMask, ia, 31);
    ib += total_a;
    const float z = __shfl_sync(kFullMask, ib, 31);
    const float target = u * z;
    const float ea = ia - a, eb = ib - b;  // the carry before each tile
    const unsigned in_a = __ballot_sync(kFullMask, lane < tiles && ia > target);
    const unsigned in_b = __ballot_sync(kFullMask, lane + 32 < tiles && ib > target);
    const int tile = in_a != 0u ? __ffs(in_a) - 1 : in_b != 0u ? 32 + __ffs(in_b) - 1 : -1;
    if (lane == 0) {
      s.tile = tile;
      s.target = target;
    }
    if (tile >= 0 && lane == tile % 32) s.carry = tile < 32 ? ea : eb;
  }
  __syncthreads();
  const int tile = s.tile;
  const float carry = s.carry, target = s.target;
  __syncthreads();  // s is free for the next row's use
  const int drawn = tile >= 0 ? draw_token(x, n, tau, m, target, tile, carry) : -1;
  return drawn >= 0 ? drawn : last_kept;
}

// Count and mass (fixed point, as the top-p select weighs it) of the elements x >= tau.
struct KeptStats {
  int count;
  Mass mass;
};
template <class Row>
__device__ KeptStats kept_stats(const Row& x, int n, float tau, float m) {
  int count = 0;
  Mass mass = 0;
  const KeptMass weight{tau, m};
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = x[i];
    if (v >= tau) {
      ++count;
      mass += weight(v);
    }
  }
  return {block_reduce(count, Sum{}), block_reduce(mass, Sum{})};
}

// Copies the elements x >= tau (at most kCandidates of them) into `list`, in index order.
template <class Row>
__device__ void compact(const Row& x, int vocab, float tau, CandidateList& list) {
  int carry = 0;
  for (int base = 0; base < vocab; base += kThreads * kDrawItems) {
    const int first = base + static_cast<int>(threadIdx.x) * kDrawItems;
    float v[kDrawItems];
    int count = 0;
    for (int j = 0; j < kDrawItems; ++j) {
      v[j] = first + j < vocab ? x[first + j] : -INFINITY;
      count += first + j < vocab && v[j] >= tau;
    }
    int tile_count = 0;
    int at = carry + block_exclusive_sum(count, tile_count);
    for (int j = 0; j < kDrawItems; ++j) {
      if (first + j < vocab && v[j] >= tau) {
        list.values[at] = v[j];
        list.indices[at] = first + j;
        ++at;
      }
    }
    carry += tile_count;
  }
  __syncthreads();
}

// Steps 4 and 5 over x[0, n) (the row, or the short list holding every x >= the nucleus's
// cut): the top-p cut against `nucleus_mass` (top_p * Z_a), then Z and the draw. Returns a
// position in x, or -1 when nothing is kept (cannot happen for a valid call).
template <class Row>
__device__ int sample_kept(const Row& x, int n, float tau_a, float m, const SamplingParams& p, Mass nucleus_mass,
                           std::uint64_t step, SelectScratch<Mass>& mass_scratch, DrawScratch& draw_scratch) {
  float tau = tau_a;
  if (p.top_p < 1.f) tau = fmaxf(tau, select_threshold(x, n, nucleus_mass, KeptMass{tau_a, m}, mass_scratch));
  const float u = sample::sampling_uniform(p.seed, step);
  if (n > kTile && n <= kMaxTiles * kTile) return draw_by_tiles(x, n, tau, m, u, draw_scratch);
  float z = 0.f;
  int last_kept = -1;  // the fallback when rounding runs past the end: the last kept p > 0
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = x[i];
    if (v < tau) continue;
    const float w = expf(v - m);
    z += w;
    if (w > 0.f) last_kept = i;
  }
  z = block_reduce(z, Sum{});
  last_kept = block_reduce(last_kept, Max{});
  const int drawn = draw_token(x, n, tau, m, u * z);
  return drawn >= 0 ? drawn : last_kept;
}

// ---- the kernel ------------------------------------------------------------------------

template <bool kCached>
__global__ void __launch_bounds__(kThreads, 1)
    sample_rows_kernel(const float* logits, int vocab, const SamplingParams* params, const std::uint64_t* steps,
                       std::int32_t* tokens, float* logprobs, std::int32_t* tokens_copy) {
  extern __shared__ float cached[];
  __shared__ SelectScratch<int> count_scratch;
  __shared__ SelectScratch<Mass> mass_scratch;
  __shared__ CandidateList list;
  __shared__ DrawScratch draw_scratch;
  const int row = blockIdx.x;
  const float* raw = logits + static_cast<std::int64_t>(row) * vocab;
  const SamplingParams p = params[row];
  const bool greedy = !(p.temperature > 0.f);  // 0 (validated on the host)

  RowStats stats{-INFINITY, INT_MAX, 0.f};
  for_each_raw(raw, vocab, [&](int i, float l) {
    if (l > stats.max) {
      stats.sum = stats.sum * expf(stats.max - l) + 1.f;
      stats.max = l;
      stats.argmax = i;
    } else if (l > -INFINITY) {
      stats.sum += expf(l - stats.max);
    }
    if constexpr (kCached) {
      if (!greedy) cached[i] = sample::scaled_logit(l, p.temperature);
    }
  });
  stats = block_reduce(stats, Merge{});  // its barrier also publishes `cached`
  if (stats.argmax >= vocab) stats.argmax = 0;  // an all -inf row (rejected by the CPU twin)
  const float log_normalizer = stats.max + logf(stats.sum);
  const auto finish = [&](int token) {
    if (threadIdx.x == 0) {
      tokens[row] = token;
      if (tokens_copy != nullptr) tokens_copy[row] = token;
      logprobs[row] = raw[token] - log_normalizer;
    }
  };
  if (greedy) {
    finish(stats.argmax);
    return;
  }

  const ScaledRow<kCached> x{raw, cached, p.temperature};
  const float m = sample::scaled_logit(stats.max, p.temperature);  // division is monotonic: = max x
  float tau = sample::min_p_threshold(m, p.min_p);
  if (p.top_k > 0 && p.top_k < vocab) tau = fmaxf(tau, select_threshold(x, vocab, p.top_k, CountAll{}, count_scratch));
  // Plain temperature sampling keeps every element: no pass needed to count them.
  const KeptStats kept = tau == -INFINITY && !(p.top_p < 1.f) ? KeptStats{vocab, 0} : kept_stats(x, vocab, tau, m);
  const Mass nucleus_mass = static_cast<Mass>(static_cast<double>(p.top_p) * static_cast<double>(kept.mass));
  float list_floor = tau;  // the short list holds x >= list_floor
  int floor_count = kept.count;
  if (p.top_p < 1.f && kept.count > kCandidates) {  // do the kCandidates largest hold the nucleus?
    const float largest = fmaxf(tau, select_threshold(x, vocab, kCandidates, CountAll{}, count_scratch));
    const KeptStats top = kept_stats(x, vocab, largest, m);
    if (top.count <= kCandidates && top.mass >= nucleus_mass) {
      list_floor = largest;
      floor_count = top.count;
    }
  }
  int token = -1;
  if (floor_count <= kCandidates) {
    compact(x, vocab, list_floor, list);
    const int at = sample_kept(ListRow{list.values}, floor_count, tau, m, p, nucleus_mass, steps[row], mass_scratch,
                               draw_scratch);
    if (at >= 0) token = list.indices[at];
  } else {
    token = sample_kept(x, vocab, tau, m, p, nucleus_mass, steps[row], mass_scratch, draw_scratch);
  }
  finish(token >= 0 ? token : stats.argmax);
}

// Floats of a row the cached kernel holds in shared memory on the current device; raises the
// kernel's dynamic shared-memory limit to that on the first call per device.
int cached_row_capacity() {
  static std::mutex mutex;
  static std::vector<int> capacity;  // per device; -1: not asked yet
  int device = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  if (capacity.size() <= static_cast<std::size_t>(device)) capacity.resize(static_cast<std::size_t>(device) + 1, -1);
  int& floats = capacity[static_cast<std::size_t>(device)];
  if (floats < 0) {
    int optin_bytes = 0;
    HG_CUDA_CHECK(cudaDeviceGetAttribute(&optin_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attributes{};
    HG_CUDA_CHECK(cudaFuncGetAttributes(&attributes, sample_rows_kernel<true>));
    const int bytes = optin_bytes - static_cast<int>(attributes.sharedSizeBytes);
    HG_CUDA_CHECK(cudaFuncSetAttribute(sample_rows_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    floats = bytes / static_cast<int>(sizeof(float));
  }
  return floats;
}

}  // namespace

void sample_rows(const Tensor& logits, const void* params, const std::uint64_t* steps, std::int32_t* tokens,
                 float* logprobs, void* stream, std::int32_t* tokens_copy) {
  HG_CHECK(logits.defined() && logits.device() == Device::cuda && logits.dtype() == DType::f32 &&
               logits.rank() == 2 && logits.is_contiguous() && logits.size(1) > 0,
           "cuda::sample_rows: logits must be a contiguous CUDA f32 tensor [rows, vocab] with vocab >= 1, got ",
           logits.defined() ? logits.shape_str() + " " + dtype_name(logits.dtype()) + " on " +
                                  device_name(logits.device())
                            : std::string("nothing"));
  const std::int64_t rows = logits.size(0), vocab = logits.size(1);
  HG_CHECK(vocab <= (std::int64_t{1} << 30), "cuda::sample_rows: vocab ", vocab, " is above 2^30");
  HG_CHECK(rows <= INT_MAX, "cuda::sample_rows: ", rows, " rows is above the grid limit");
  if (rows == 0) return;
  HG_CHECK(params != nullptr && steps != nullptr && tokens != nullptr && logprobs != nullptr,
           "cuda::sample_rows: params, steps, tokens and logprobs must be device arrays of ", rows,
           " entries, got a null pointer");
  const auto* device_params = static_cast<const SamplingParams*>(params);
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const unsigned grid = static_cast<unsigned>(rows);
  if (vocab <= cached_row_capacity()) {
    const std::size_t bytes = static_cast<std::size_t>(vocab) * sizeof(float);
    sample_rows_kernel<true><<<grid, kThreads, bytes, cuda_stream>>>(
        logits.data<float>(), static_cast<int>(vocab), device_params, steps, tokens, logprobs, tokens_copy);
  } else {
    sample_rows_kernel<false><<<grid, kThreads, 0, cuda_stream>>>(
        logits.data<float>(), static_cast<int>(vocab), device_params, steps, tokens, logprobs, tokens_copy);
  }
  HG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydragen::cuda
