// Token sampling: temperature, top-k, min-p and top-p over rows of logits, one random draw
// per (seed, step). The CPU twin here is the spec; src/backend/cuda/sampling.h is the device
// twin and tests/test_cuda_sampling.cpp compares both.
//
// The algorithm (both twins), for one row of raw logits l and its SamplingParams:
//   T == 0: token = argmax l (the lowest index on ties). Nothing else is read.
//   x_i = l_i / T (+0.0f, so -0 and +0 are one value), m = max x, p_i = exp(x_i - m).
//   tau_a = max(tau_k, tau_min_p): tau_k = the top_k-th largest x (ties at it all kept; -inf
//     when top_k is 0 or >= vocab), tau_min_p = m + log(min_p) (-inf when min_p is 0), i.e.
//     p_i >= min_p * p_max.
//   top_p < 1: Z_a = sum of p_i over x_i >= tau_a; tau_p = the largest t such that
//     sum of p_i over x_i >= max(tau_a, t) is >= top_p * Z_a (ties at tau_p all kept).
//   kept = { i : x_i >= tau }, tau = max(tau_a, tau_p); Z = sum of p_i over kept.
//   u = sampling_uniform(seed, step) in [0, 1), target = u * Z: the token is the first kept
//     index (in index order) whose running sum of p exceeds target; the last kept index if
//     rounding runs past.
//   logprob = l[token] - (max l + log sum exp(l - max l)): the token's log-probability under
//     the unmodified distribution (an OpenAI-style logprobs field), whatever the filters.
// Nothing sorts the vocabulary: the thresholds are order statistics (the device twin finds
// them by a radix select over the float bits). Sums run in another order on the device, so
// the twins agree exactly except where a cumulative mass lies within rounding of a cut.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>

#include "hydragen/tensor.h"
#include "core/counter_rng.h"

namespace hydragen::sample {

// One row's parameters. Plain data: the CUDA twin copies arrays of it to the device byte for byte.
struct SamplingParams {
  float temperature = 0.f;  // 0: greedy (argmax, lowest index on ties)
  std::int32_t top_k = 0;   // 0: off; keep tokens whose scaled logit >= the k-th largest
  float top_p = 1.f;        // 1: off; nucleus over what top-k and min-p left
  float min_p = 0.f;        // 0: off; keep p_i >= min_p * p_max
  std::uint64_t seed = 0;
};
static_assert(std::is_trivially_copyable_v<SamplingParams> && sizeof(SamplingParams) == 24,
              "SamplingParams is copied to the device as is");

// Throws hydragen::Error naming the field: temperature >= 0 and finite, top_k >= 0,
// 0 < top_p <= 1, 0 <= min_p <= 1.
void validate(const SamplingParams& params);

// Row r of logits f32 [rows, vocab] (CPU): tokens[r] and logprobs[r] =
// log_softmax(logits[r])[tokens[r]], with params[r] and the draw of (params[r].seed, steps[r]).
// Every span has `rows` entries; every params[r] is validated; -inf masks a token, but NaN,
// +inf or a row of only -inf throws.
void sample_rows(const Tensor& logits, std::span<const SamplingParams> params, std::span<const std::uint64_t> steps,
                 std::span<std::int32_t> tokens, std::span<float> logprobs);

// ---- the scalar steps both twins share (host and device) --------------------------------

// The draw of (seed, step): k / 2^24 for 24 random bits k of counter_rng's hash, in [0, 1).
inline constexpr std::uint64_t kSamplingStream = 0x73616d706c696e67ull;  // "sampling"
HG_HOST_DEVICE inline float sampling_uniform(std::uint64_t seed, std::uint64_t step) {
  return 0.5f * (counter_uniform(stream_key(seed, kSamplingStream), step) + 1.0f);  // exact: 24-bit values
}

// x = logit / T; adding +0 turns -0 into +0, so float order and bit order agree (radix select).
HG_HOST_DEVICE inline float scaled_logit(float logit, float temperature) { return logit / temperature + 0.0f; }

// The min-p cut on scaled logits, m + log(min_p), taken in double so both twins round it the same.
HG_HOST_DEVICE inline float min_p_threshold(float max_scaled, float min_p) {
  return min_p > 0.f ? static_cast<float>(static_cast<double>(max_scaled) + ::log(static_cast<double>(min_p)))
                     : -INFINITY;
}

}  // namespace hydragen::sample
