// Token sampling: repetition, frequency and presence penalties, temperature, top-k, min-p and
// top-p over rows of logits, one random draw per (seed, step), and the top-N logprobs. The
// CPU twin here is the spec; src/backend/cuda/sampling.h is the device twin and
// tests/test_cuda_sampling.cpp compares both.
//
// The algorithm (both twins), for one row of raw logits l, its SamplingParams, its history H
// (token_history.h: each distinct token the sequence holds before this step's input token,
// with how many of those it generated) and its input token t (generated when step > 0, else
// the prompt's last token):
//   Penalties, only where one is on (has_penalties): token v is held when v is in H or v = t;
//     c_v = its generated count in H, + 1 when v = t and step > 0. A held token's logit
//     becomes penalized_logit(l_v, c_v): repetition r first (HF / vLLM: l > 0 ? l / r : l * r),
//     then - frequency * c_v, then - presence where c_v > 0 (OpenAI). l' = the row so
//     penalized (l' = l without penalties).
//   T == 0: token = argmax l' (the lowest index on ties). No filter is read.
//   x_i = scaled_logit(l'_i, T) (l' / T, +0.0f), m = max x, p_i = exp(x_i - m).
//   tau_a = max(tau_k, tau_min_p): tau_k = the top_k-th largest x (ties at it all kept; -inf
//     when top_k is 0 or >= vocab), tau_min_p = m + log(min_p) (-inf when min_p is 0), i.e.
//     p_i >= min_p * p_max.
//   top_p < 1: Z_a = sum of p_i over x_i >= tau_a; tau_p = the largest t such that
//     sum of p_i over x_i >= max(tau_a, t) is >= top_p * Z_a (ties at tau_p all kept).
//   kept = { i : x_i >= tau }, tau = max(tau_a, tau_p); Z = sum of p_i over kept.
//   u = sampling_uniform(seed, step) in [0, 1), target = u * Z: the token is the first kept
//     index (in index order) whose running sum of p exceeds target; the last kept index if
//     rounding runs past.
//   logprob = l[token] - log Z_l, log Z_l = max l + log sum exp(l - max l): the token's
//     log-probability under the unmodified distribution, log_softmax of the raw logits (an
//     OpenAI-style logprobs field), whatever the penalties, temperature and filters.
//   forced_token >= 0: the token is forced_token (no draw, no filter read); its logprob and
//     top-N as above.
//   top-N (N = logprobs): the min(N, vocab) tokens of largest raw l, by l descending, ties by
//     the lowest index (-0 = +0), each with l - log Z_l: the same distribution as logprob.
// l' and x are the same IEEE operations in both twins (penalized_logit, scaled_logit; `product`
// keeps the device from fusing a multiply into an add), so they agree bit for bit. Nothing
// sorts the vocabulary: the thresholds are order statistics (the device twin finds them by a
// radix select over the float bits). Sums run in another order on the device, so the twins agree exactly except
// where a cumulative mass lies within rounding of a cut.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <span>
#include <type_traits>

#include "hydragen/tensor.h"
#include "core/counter_rng.h"
#include "sample/token_history.h"

namespace hydragen::sample {

inline constexpr int kMaxTopLogprobs = 20;  // the most top-N logprobs a row may ask for (OpenAI's limit)

// One row's parameters. Plain data: the CUDA twin copies arrays of it to the device byte for byte.
struct SamplingParams {
  float temperature = 0.f;  // 0: greedy (argmax, lowest index on ties)
  std::int32_t top_k = 0;   // 0: off; keep tokens whose scaled logit >= the k-th largest
  float top_p = 1.f;        // 1: off; nucleus over what top-k and min-p left
  float min_p = 0.f;        // 0: off; keep p_i >= min_p * p_max
  std::uint64_t seed = 0;
  float presence_penalty = 0.f;    // 0: off; subtracted from every token generated at least once
  float frequency_penalty = 0.f;   // 0: off; subtracted once per time a token was generated
  float repetition_penalty = 1.f;  // 1: off; divides (> 0) or multiplies (<= 0) a held token's logit
  std::int32_t logprobs = 0;       // 0: off; the top-N logprobs returned with each token
  // >= 0: the row's token is this one, not a draw, and its logprob is recorded (scoring a
  // given continuation); -1: sampled.
  std::int32_t forced_token = -1;
};
static_assert(std::is_trivially_copyable_v<SamplingParams> && sizeof(SamplingParams) == 48,
              "SamplingParams is copied to the device as is");

// Throws hydragen::Error naming the field: temperature >= 0 and finite, top_k >= 0,
// 0 < top_p <= 1, 0 <= min_p <= 1, presence and frequency penalties in [-2, 2] (OpenAI's
// range), repetition penalty finite and > 0, logprobs in [0, kMaxTopLogprobs].
void validate(const SamplingParams& params);

// Whether the row's logits are penalized at all (rows without penalties skip their history).
HG_HOST_DEVICE inline bool has_penalties(const SamplingParams& p) {
  return p.presence_penalty != 0.f || p.frequency_penalty != 0.f || p.repetition_penalty != 1.f;
}

// One of a row's top-N: a token and its log-probability.
struct TokenLogprob {
  std::int32_t token;
  float logprob;
};

// Row r of logits f32 [rows, vocab] (CPU): tokens[r] and logprobs[r] =
// log_softmax(logits[r])[tokens[r]], with params[r], the draw of (params[r].seed, steps[r]),
// and, for rows with penalties, input_tokens[r] and history's row r (empty `input_tokens` or
// `history.offsets` when no row has penalties). Row r's top-N goes to
// top[r * kMaxTopLogprobs + j], j < min(N, vocab) (`top` may be empty when no row asks).
// Every params[r] is validated, the history too (validate_history); -inf masks a token, but
// NaN, +inf or a row of only -inf throws.
void sample_rows(const Tensor& logits, std::span<const SamplingParams> params, std::span<const std::uint64_t> steps,
                 std::span<const std::int32_t> input_tokens, const TokenHistory& history,
                 std::span<std::int32_t> tokens, std::span<float> logprobs, std::span<TokenLogprob> top);

// ---- the scalar steps both twins share (host and device) --------------------------------

// The draw of (seed, step): k / 2^24 for 24 random bits k of counter_rng's hash, in [0, 1).
inline constexpr std::uint64_t kSamplingStream = 0x73616d706c696e67ull;  // "sampling"
HG_HOST_DEVICE inline float sampling_uniform(std::uint64_t seed, std::uint64_t step) {
  return 0.5f * (counter_uniform(stream_key(seed, kSamplingStream), step) + 1.0f);  // exact: 24-bit values
}

// A finite value clamped into [-FLT_MAX, FLT_MAX]; -inf (a masked token) stays -inf, so an
// extreme penalty or temperature never turns a logit into +inf (and a mass into NaN).
HG_HOST_DEVICE inline float clamp_logit(float v, float original) {
  return original == -INFINITY ? original : fminf(fmaxf(v, -FLT_MAX), FLT_MAX);
}

// x = logit / T; adding +0 turns -0 into +0, so float order and bit order agree (radix select).
HG_HOST_DEVICE inline float scaled_logit(float logit, float temperature) {
  return clamp_logit(logit / temperature, logit) + 0.0f;
}

// a * b rounded on its own: the device never fuses it with an add (FMA), as the host does not.
HG_HOST_DEVICE inline float product(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// The penalized logit of a held token that the sequence generated `generated` times.
HG_HOST_DEVICE inline float penalized_logit(float logit, std::int32_t generated, const SamplingParams& p) {
  float v = logit;
  if (p.repetition_penalty != 1.f)
    v = clamp_logit(v > 0.f ? v / p.repetition_penalty : product(v, p.repetition_penalty), logit);
  if (generated > 0) {
    v = v - product(p.frequency_penalty, static_cast<float>(generated));  // |2 * 2^31|: a finite v stays finite
    v = v - p.presence_penalty;
  }
  return v;
}

// The min-p cut on scaled logits, m + log(min_p), taken in double so both twins round it the same.
HG_HOST_DEVICE inline float min_p_threshold(float max_scaled, float min_p) {
  return min_p > 0.f ? static_cast<float>(static_cast<double>(max_scaled) + ::log(static_cast<double>(min_p)))
                     : -INFINITY;
}

}  // namespace hydragen::sample
