// The device sampler's view of a row (sampling.cu): the scaled logits x = scaled_logit(l', T)
// with the penalties of src/sample/sampling.h applied to the held tokens, and the top-N
// logprobs of the raw row.
//
// Penalties: with the row in shared memory, each held token's x is rewritten there once.
// Without (rows past shared memory), every pass recomputes x from the raw row: a bitmap of
// the held tokens in shared memory marks where to look the count up (held_count's binary
// search over the row's history in global memory); a vocabulary past the bitmap looks up
// every token (correct, slow: no model has one).
// Top-N: the N-th largest raw value by the radix select, then one index-order pass keeps the
// values above it (fewer than N) and the first ties at it; one thread orders the short list.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "backend/cuda/sampling_block.cuh"
#include "sample/sampling.h"

namespace hydragen::cuda::sampling {

// A row's penalty inputs (active: the row has penalties and the step passed its history).
struct RowPenalties {
  bool active = false;
  sample::SamplingParams params;
  const sample::TokenCount* entries = nullptr;  // the row's history, sorted by token
  int count = 0;
  int input_token = 0;
  bool input_generated = false;
  const std::uint32_t* marks = nullptr;  // held tokens' bits (shared memory); nullptr: look every token up

  __device__ bool maybe_held(int i) const { return marks == nullptr || ((marks[i >> 5] >> (i & 31)) & 1u) != 0u; }
  // l' of token i from its raw logit.
  __device__ float penalized(float logit, int i) const {
    const std::int32_t c = sample::held_count(entries, count, i, input_token, input_generated);
    return c < 0 ? logit : sample::penalized_logit(logit, c, params);
  }
};

// Row `blockIdx.x` of x: the shared-memory copy (penalties written into it), or recomputed
// from the raw row (penalties looked up).
template <bool kCached>
struct ScaledRow {
  const float* raw;
  const float* cached;
  float temperature;
  RowPenalties penalties;
  __device__ float operator[](int i) const {
    if constexpr (kCached) {
      return cached[i];
    } else {
      float l = raw[i];
      if (penalties.active && penalties.maybe_held(i)) l = penalties.penalized(l, i);
      return sample::scaled_logit(l, temperature);
    }
  }
};

// Shared-memory row: x of every held token rewritten (the input token by thread 0, the
// history's others by the block: distinct tokens, no two threads write one element).
// Ends with a barrier.
__device__ inline void write_penalties(float* cached, const float* raw, const RowPenalties& p, float temperature) {
  for (int j = threadIdx.x; j < p.count; j += kThreads) {
    const sample::TokenCount e = p.entries[j];
    if (e.token != p.input_token)
      cached[e.token] = sample::scaled_logit(sample::penalized_logit(raw[e.token], e.generated, p.params), temperature);
  }
  if (threadIdx.x == 0)
    cached[p.input_token] = sample::scaled_logit(p.penalized(raw[p.input_token], p.input_token), temperature);
  __syncthreads();
}

// Bitmap of the held tokens in `marks` (`words` words; none when 0). Ends with a barrier.
__device__ inline void mark_held(std::uint32_t* marks, int words, const RowPenalties& p) {
  if (words == 0) return;
  for (int w = threadIdx.x; w < words; w += kThreads) marks[w] = 0u;
  __syncthreads();
  for (int j = threadIdx.x; j < p.count; j += kThreads) {
    const int t = p.entries[j].token;
    atomicOr(&marks[t >> 5], 1u << (t & 31));
  }
  if (threadIdx.x == 0) atomicOr(&marks[p.input_token >> 5], 1u << (p.input_token & 31));
  __syncthreads();
}

// The largest x and its first index (an argmax pass; sum unused).
template <class Row>
__device__ RowStats max_of(const Row& x, int vocab) {
  RowStats best{-INFINITY, INT_MAX, 0.f};
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = x[i];
    if (v > best.max) best = {v, i, 0.f};  // increasing i: the first of equal values stays
  }
  return block_reduce(best, Merge{});
}

// ---- top-N --------------------------------------------------------------------------------

// The raw row with -0 as +0 (ties between them broken by index, as between equal values).
struct RawRow {
  const float* raw;
  __device__ float operator[](int i) const { return raw[i] + 0.0f; }
};

struct TopScratch {
  float above_values[sample::kMaxTopLogprobs];
  int above_indices[sample::kMaxTopLogprobs];  // values above the N-th largest, in index order
  int ties[sample::kMaxTopLogprobs];           // the first indices whose value is the N-th largest
  int above_count;
};

// The row's min(n, vocab) largest raw logits, ordered, each with l - log_normalizer, into top.
__device__ inline void write_top_logprobs(const float* raw_row, int vocab, int n, float log_normalizer,
                                          sample::TokenLogprob* top, SelectScratch<int>& select, TopScratch& s) {
  const RawRow raw{raw_row};
  n = min(n, vocab);
  const float nth = select_threshold(raw, vocab, n, CountAll{}, select);
  int above_carry = 0, tie_carry = 0;
  for (int base = 0; base < vocab; base += kTile) {  // tiles in index order, kDrawItems contiguous per thread
    const int first = base + static_cast<int>(threadIdx.x) * kDrawItems;
    float v[kDrawItems];
    int above = 0, ties = 0;
    for (int j = 0; j < kDrawItems; ++j) {
      v[j] = first + j < vocab ? raw[first + j] : -INFINITY;
      above += first + j < vocab && v[j] > nth;
      ties += first + j < vocab && v[j] == nth;
    }
    int tile_total = 0;  // above in the high half, ties in the low half: each <= kTile < 2^16
    const int before = block_exclusive_sum((above << 16) | ties, tile_total);
    int above_at = above_carry + (before >> 16), tie_at = tie_carry + (before & 0xffff);
    for (int j = 0; j < kDrawItems; ++j) {
      if (first + j >= vocab) break;
      if (v[j] > nth) {  // fewer than n of these in the whole row
        s.above_values[above_at] = v[j];
        s.above_indices[above_at++] = first + j;
      } else if (v[j] == nth) {
        if (tie_at < n) s.ties[tie_at] = first + j;
        ++tie_at;
      }
    }
    above_carry += tile_total >> 16;
    tie_carry = min(tie_carry + (tile_total & 0xffff), n);  // (only the first n ties are kept)
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int above = above_carry;
    for (int a = 1; a < above; ++a) {  // insertion sort: value descending, index ascending
      const float value = s.above_values[a];
      const int index = s.above_indices[a];
      int b = a;
      for (; b > 0 && (s.above_values[b - 1] < value ||
                       (s.above_values[b - 1] == value && s.above_indices[b - 1] > index));
           --b) {
        s.above_values[b] = s.above_values[b - 1];
        s.above_indices[b] = s.above_indices[b - 1];
      }
      s.above_values[b] = value;
      s.above_indices[b] = index;
    }
    for (int j = 0; j < n; ++j) {
      const int token = j < above ? s.above_indices[j] : s.ties[j - above];
      top[j] = {token, raw_row[token] - log_normalizer};
    }
  }
  __syncthreads();  // s and select are free for the row's next use
}

}  // namespace hydragen::cuda::sampling
