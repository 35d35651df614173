// Token sampling on the device, one block of 1024 threads per row; the algorithm is the one
// written down in src/sample/sampling.h, and the CPU twin there is its spec.
//
// Passes over a row (greedy rows without penalties stop after the first and the top-N):
//   1. raw logits (16-byte loads, 4 in flight per thread): max, first argmax, sum exp(l - max)
//      (online) -> logprob; the scaled row x = l / T is kept in shared memory when it fits
//      (else every later pass re-reads the raw row from global memory / L2).
//   top-N (rows asking for logprobs): a radix select of the N-th largest raw logit and one
//      pass keeping what lies above it and the first ties (sampling_rows.cuh).
//   penalties (rows with them): the held tokens' x rewritten in shared memory, or marked in
//      a bitmap for the passes that recompute x; one pass for max x and its argmax (the
//      greedy token). Rows without penalties read no history.
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
#include "backend/cuda/sampling_block.cuh"
#include "backend/cuda/sampling_rows.cuh"
#include "hydragen/error.h"
#include "sample/sampling.h"

namespace hydragen::cuda {

namespace {

using namespace sampling;
using sample::SamplingParams;

constexpr int kCandidates = kTile;     // the short list's capacity: one tile
constexpr int kMaxTiles = 2 * kWarps;  // rows of up to 262,144 elements draw by tile totals
constexpr int kMaxTop = sample::kMaxTopLogprobs;

// The kept set (or a superset of the nucleus), compacted in index order.
struct CandidateList {
  float values[kCandidates];
  int indices[kCandidates];
};
struct ListRow {
  const float* values;
  __device__ float operator[](int i) const { return values[i]; }
};

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

// The row's penalty inputs from the step's arrays; inactive without penalties or history.
__device__ RowPenalties row_penalties(const SamplingArgs& a, int row, const SamplingParams& p,
                                      const std::uint32_t* marks) {
  RowPenalties r;
  if (!sample::has_penalties(p) || a.input_tokens == nullptr) return r;
  r.active = true;
  r.params = p;
  r.input_token = a.input_tokens[row];
  r.input_generated = a.steps[row] > 0;
  if (a.history_offsets != nullptr && a.history != nullptr) {
    const int begin = a.history_offsets[row];
    r.entries = a.history + begin;
    r.count = a.history_offsets[row + 1] - begin;
  }
  r.marks = marks;
  return r;
}

// Dynamic shared memory: the scaled row (kCached), or the held tokens' bitmap of mark_words
// words (0: none; every token is looked up).
template <bool kCached>
__global__ void __launch_bounds__(kThreads, 1)
    sample_rows_kernel(const float* logits, int vocab, SamplingArgs a, int mark_words) {
  extern __shared__ float dynamic_shared[];
  __shared__ SelectScratch<int> count_scratch;
  __shared__ SelectScratch<Mass> mass_scratch;
  __shared__ CandidateList list;
  __shared__ DrawScratch draw_scratch;
  __shared__ TopScratch top_scratch;
  float* cached = dynamic_shared;
  const int row = blockIdx.x;
  const float* raw = logits + static_cast<std::int64_t>(row) * vocab;
  const SamplingParams p = a.params[row];
  const bool greedy = !(p.temperature > 0.f);  // 0 (validated on the host)
  RowPenalties penalties =
      row_penalties(a, row, p, kCached || mark_words == 0 ? nullptr : reinterpret_cast<std::uint32_t*>(dynamic_shared));
  // A greedy row with penalties takes the argmax of x = l' (temperature 1).
  const float temperature = greedy ? 1.f : p.temperature;
  const bool scaled = !greedy || penalties.active;

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
      if (scaled) cached[i] = sample::scaled_logit(l, temperature);
    }
  });
  stats = block_reduce(stats, Merge{});  // its barrier also publishes `cached`
  if (stats.argmax >= vocab) stats.argmax = 0;  // an all -inf row (rejected by the CPU twin)
  const float log_normalizer = stats.max + logf(stats.sum);
  if (p.logprobs > 0 && a.top != nullptr)
    write_top_logprobs(raw, vocab, p.logprobs, log_normalizer, a.top + static_cast<std::int64_t>(row) * kMaxTop,
                       count_scratch, top_scratch);
  const auto finish = [&](int token) {
    if (threadIdx.x == 0) {
      a.tokens[row] = token;
      if (a.tokens_copy != nullptr) a.tokens_copy[row] = token;  // (this row's input was read above)
      a.logprobs[row] = raw[token] - log_normalizer;
    }
  };
  if (p.forced_token >= 0 || !scaled) {  // a forced token (in the vocabulary: checked on the host)
    finish(p.forced_token >= 0 ? p.forced_token : stats.argmax);
    return;
  }

  float m = sample::scaled_logit(stats.max, temperature);  // scaling is monotonic: = max x
  int best = stats.argmax;
  if (penalties.active) {
    if constexpr (kCached) write_penalties(cached, raw, penalties, temperature);
    else mark_held(reinterpret_cast<std::uint32_t*>(dynamic_shared), mark_words, penalties);
    const RowStats top_x = max_of(ScaledRow<kCached>{raw, cached, temperature, penalties}, vocab);
    m = top_x.max;
    best = top_x.argmax;
    if (greedy) {
      finish(best);
      return;
    }
  }
  const ScaledRow<kCached> x{raw, cached, temperature, penalties};
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
    const int at = sample_kept(ListRow{list.values}, floor_count, tau, m, p, nucleus_mass, a.steps[row], mass_scratch,
                               draw_scratch);
    if (at >= 0) token = list.indices[at];
  } else {
    token = sample_kept(x, vocab, tau, m, p, nucleus_mass, a.steps[row], mass_scratch, draw_scratch);
  }
  finish(token >= 0 ? token : best);
}

// Bytes of dynamic shared memory each kernel may take on the current device (the opt-in
// limit less its static shared memory); raises both kernels' limits on the first call per device.
struct SharedCapacity {
  int cached_bytes = -1, uncached_bytes = -1;
};
SharedCapacity shared_capacity() {
  static std::mutex mutex;
  static std::vector<SharedCapacity> capacity;  // per device; -1: not asked yet
  int device = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  if (capacity.size() <= static_cast<std::size_t>(device)) capacity.resize(static_cast<std::size_t>(device) + 1);
  SharedCapacity& c = capacity[static_cast<std::size_t>(device)];
  if (c.cached_bytes < 0) {
    int optin_bytes = 0;
    HG_CUDA_CHECK(cudaDeviceGetAttribute(&optin_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const auto raise = [&](const void* kernel) {
      cudaFuncAttributes attributes{};
      HG_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
      const int bytes = optin_bytes - static_cast<int>(attributes.sharedSizeBytes);
      HG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
      return bytes;
    };
    c.cached_bytes = raise(reinterpret_cast<const void*>(sample_rows_kernel<true>));
    c.uncached_bytes = raise(reinterpret_cast<const void*>(sample_rows_kernel<false>));
  }
  return c;
}

}  // namespace

void sample_rows(const Tensor& logits, const SamplingArgs& args, void* stream) {
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
  HG_CHECK(args.params != nullptr && args.steps != nullptr && args.tokens != nullptr && args.logprobs != nullptr,
           "cuda::sample_rows: params, steps, tokens and logprobs must be device arrays of ", rows,
           " entries, got a null pointer");
  const bool history = args.input_tokens != nullptr;
  HG_CHECK(history == (args.history_offsets != nullptr) && history == (args.history != nullptr),
           "cuda::sample_rows: input_tokens, history_offsets and history come together (penalties) or not at all");
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const unsigned grid = static_cast<unsigned>(rows);
  const SharedCapacity capacity = shared_capacity();
  const std::int64_t row_bytes = vocab * static_cast<std::int64_t>(sizeof(float));
  if (row_bytes <= capacity.cached_bytes) {
    sample_rows_kernel<true><<<grid, kThreads, static_cast<std::size_t>(row_bytes), cuda_stream>>>(
        logits.data<float>(), static_cast<int>(vocab), args, 0);
  } else {
    const std::int64_t words = (vocab + 31) / 32;  // the held tokens' bitmap, where it fits
    const int mark_words = history && words * 4 <= capacity.uncached_bytes ? static_cast<int>(words) : 0;
    sample_rows_kernel<false><<<grid, kThreads, static_cast<std::size_t>(mark_words) * 4, cuda_stream>>>(
        logits.data<float>(), static_cast<int>(vocab), args, mark_words);
  }
  HG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydragen::cuda
