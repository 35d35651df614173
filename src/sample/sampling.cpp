// The CPU twin of token sampling, written as the spec in sampling.h reads: thresholds as
// order statistics, sums in double, the draw walked in index order.
#include "sample/sampling.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "core/thread_pool.h"
#include "hydragen/error.h"

namespace hydragen::sample {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The first index of the largest value.
std::int32_t argmax(std::span<const float> values) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = i;
  }
  return static_cast<std::int32_t>(best);
}

// log sum exp(l - max l) + max l: log_softmax(l)[i] = l[i] - this.
double log_normalizer(std::span<const float> raw, float max_raw) {
  double sum = 0.0;
  for (const float l : raw) sum += std::exp(static_cast<double>(l) - max_raw);
  return max_raw + std::log(sum);
}

// The k-th largest of x (ties counted), or -inf when the filter is off.
float top_k_threshold(std::span<const float> x, std::int32_t top_k) {
  if (top_k <= 0 || static_cast<std::size_t>(top_k) >= x.size()) return kNegInf;
  std::vector<float> copy(x.begin(), x.end());
  std::nth_element(copy.begin(), copy.begin() + (top_k - 1), copy.end(), std::greater<>());
  return copy[static_cast<std::size_t>(top_k - 1)];
}

// The largest t among the kept values (x >= tau_a) such that the mass of kept values >= t
// reaches top_p of the kept mass.
float top_p_threshold(std::span<const float> x, float tau_a, float m, float top_p) {
  std::vector<float> kept;
  for (const float v : x) {
    if (v >= tau_a) kept.push_back(v);
  }
  std::sort(kept.begin(), kept.end(), std::greater<>());
  double kept_mass = 0.0;
  for (const float v : kept) kept_mass += std::exp(v - m);
  const double target = static_cast<double>(top_p) * kept_mass;
  double mass = 0.0;
  for (const float v : kept) {
    mass += std::exp(v - m);
    if (mass >= target) return v;
  }
  return kept.back();  // not reached: top_p * mass rounds above the mass
}

// log_softmax(raw)'s min(N, vocab) largest entries into out: by value descending (-0 = +0),
// ties by the lowest index.
void top_logprobs(std::span<const float> raw, double log_z, int n, std::span<TokenLogprob> out) {
  const auto count = std::min(static_cast<std::size_t>(n), raw.size());
  std::vector<std::int32_t> order(raw.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(count), order.end(),
                    [&](std::int32_t a, std::int32_t b) {
                      const float va = raw[static_cast<std::size_t>(a)], vb = raw[static_cast<std::size_t>(b)];
                      return va > vb || (va == vb && a < b);
                    });
  for (std::size_t j = 0; j < count; ++j) {
    const std::int32_t token = order[j];
    out[j] = {token, static_cast<float>(raw[static_cast<std::size_t>(token)] - log_z)};
  }
}

// The row with its held tokens penalized (the algorithm's l').
std::vector<float> penalized_row(std::span<const float> raw, const SamplingParams& params, std::uint64_t step,
                                 std::int32_t input_token, std::span<const TokenCount> held) {
  std::vector<float> l(raw.begin(), raw.end());
  for (const TokenCount& e : held) {
    const auto at = static_cast<std::size_t>(e.token);
    if (e.token != input_token) l[at] = penalized_logit(raw[at], e.generated, params);
  }
  const auto input = static_cast<std::size_t>(input_token);
  const auto n = static_cast<std::int32_t>(held.size());
  l[input] = penalized_logit(raw[input], held_count(held.data(), n, input_token, input_token, step > 0), params);
  return l;
}

struct RowSample {
  std::int32_t token;
  float logprob;
};

// Row `raw` sampled; its top-N, when asked, into `top`.
RowSample sample_row(std::span<const float> raw, const SamplingParams& params, std::uint64_t step,
                     std::int32_t input_token, std::span<const TokenCount> held, std::span<TokenLogprob> top) {
  const float max_raw = raw[static_cast<std::size_t>(argmax(raw))];
  const double log_z = log_normalizer(raw, max_raw);
  if (params.logprobs > 0) top_logprobs(raw, log_z, params.logprobs, top);
  const auto result = [&](std::int32_t token) {
    return RowSample{token, static_cast<float>(raw[static_cast<std::size_t>(token)] - log_z)};
  };
  if (params.forced_token >= 0) return result(params.forced_token);
  std::vector<float> penalized;
  std::span<const float> l = raw;
  if (has_penalties(params)) {
    penalized = penalized_row(raw, params, step, input_token, held);
    l = penalized;
  }
  const std::int32_t best = argmax(l);
  if (params.temperature == 0.f) return result(best);

  std::vector<float> x(l.size());
  for (std::size_t i = 0; i < l.size(); ++i) x[i] = scaled_logit(l[i], params.temperature);
  const float m = x[static_cast<std::size_t>(best)];  // scaling is monotonic: the max of x
  float tau = std::max(top_k_threshold(x, params.top_k), min_p_threshold(m, params.min_p));
  if (params.top_p < 1.f) tau = std::max(tau, top_p_threshold(x, tau, m, params.top_p));

  double kept_mass = 0.0;
  std::int32_t last_kept = best;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] < tau) continue;
    kept_mass += std::exp(x[i] - m);
    last_kept = static_cast<std::int32_t>(i);
  }
  const double target = static_cast<double>(sampling_uniform(params.seed, step)) * kept_mass;
  double running = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] < tau) continue;
    running += std::exp(x[i] - m);
    if (running > target) return result(static_cast<std::int32_t>(i));
  }
  return result(last_kept);
}

}  // namespace

void validate(const SamplingParams& p) {
  HG_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.f,
           "SamplingParams: temperature must be finite and >= 0 (0 = greedy), got ", p.temperature);
  HG_CHECK(p.top_k >= 0, "SamplingParams: top_k must be >= 0 (0 = off), got ", p.top_k);
  HG_CHECK(p.top_p > 0.f && p.top_p <= 1.f, "SamplingParams: top_p must be in (0, 1] (1 = off), got ", p.top_p);
  HG_CHECK(p.min_p >= 0.f && p.min_p <= 1.f, "SamplingParams: min_p must be in [0, 1] (0 = off), got ", p.min_p);
  HG_CHECK(p.presence_penalty >= -2.f && p.presence_penalty <= 2.f,
           "SamplingParams: presence_penalty must be in [-2, 2] (0 = off), got ", p.presence_penalty);
  HG_CHECK(p.frequency_penalty >= -2.f && p.frequency_penalty <= 2.f,
           "SamplingParams: frequency_penalty must be in [-2, 2] (0 = off), got ", p.frequency_penalty);
  HG_CHECK(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0.f,
           "SamplingParams: repetition_penalty must be finite and > 0 (1 = off), got ", p.repetition_penalty);
  HG_CHECK(p.logprobs >= 0 && p.logprobs <= kMaxTopLogprobs, "SamplingParams: logprobs must be in [0, ",
           kMaxTopLogprobs, "] (0 = off), got ", p.logprobs);
  HG_CHECK(p.forced_token >= -1, "SamplingParams: forced_token must be a token id or -1 (sampled), got ",
           p.forced_token);
}

void sample_rows(const Tensor& logits, std::span<const SamplingParams> params, std::span<const std::uint64_t> steps,
                 std::span<const std::int32_t> input_tokens, const TokenHistory& history,
                 std::span<std::int32_t> tokens, std::span<float> logprobs, std::span<TokenLogprob> top) {
  HG_CHECK(logits.defined() && logits.device() == Device::cpu && logits.dtype() == DType::f32 &&
               logits.rank() == 2 && logits.is_contiguous() && logits.size(1) > 0,
           "sample_rows: logits must be a contiguous CPU f32 tensor [rows, vocab] with vocab >= 1, got ",
           logits.defined() ? logits.shape_str() + " " + dtype_name(logits.dtype()) + " on " +
                                  device_name(logits.device())
                            : std::string("nothing"));
  const std::int64_t rows = logits.size(0), vocab = logits.size(1);
  HG_CHECK(vocab <= std::numeric_limits<std::int32_t>::max(), "sample_rows: vocab ", vocab,
           " does not fit an i32 token");
  const auto rows_of = [](std::size_t n) { return static_cast<std::int64_t>(n); };
  HG_CHECK(rows_of(params.size()) == rows && rows_of(steps.size()) == rows && rows_of(tokens.size()) == rows &&
               rows_of(logprobs.size()) == rows,
           "sample_rows: params, steps, tokens and logprobs must have one entry per row of logits ",
           logits.shape_str(), ", got ", params.size(), ", ", steps.size(), ", ", tokens.size(), ", ",
           logprobs.size());
  bool penalties = false, top_n = false;
  for (std::int64_t r = 0; r < rows; ++r) {
    const SamplingParams& p = params[static_cast<std::size_t>(r)];
    try {
      validate(p);
    } catch (const Error& e) {
      fail("sample_rows: params[", r, "]: ", e.what());
    }
    HG_CHECK(p.forced_token < vocab, "sample_rows: params[", r, "].forced_token ", p.forced_token,
             " is outside the vocabulary [0, ", vocab, ")");
    penalties |= has_penalties(p);
    top_n |= p.logprobs > 0;
  }
  HG_CHECK(!penalties || rows_of(input_tokens.size()) == rows, "sample_rows: rows with penalties need one input ",
           "token per row of logits ", logits.shape_str(), ", got ", input_tokens.size());
  for (std::size_t r = 0; r < input_tokens.size(); ++r)
    HG_CHECK(input_tokens[r] >= 0 && input_tokens[r] < vocab, "sample_rows: input_tokens[", r, "] = ",
             input_tokens[r], " is outside the vocabulary [0, ", vocab, ")");
  validate_history(history, rows, vocab);
  HG_CHECK(!top_n || rows_of(top.size()) == rows * kMaxTopLogprobs, "sample_rows: rows asking for logprobs need top ",
           "of rows x ", kMaxTopLogprobs, " = ", rows * kMaxTopLogprobs, " entries, got ", top.size());
  const float* data = logits.data<float>();
  for (std::int64_t r = 0; r < rows; ++r) {  // -inf masks a token; NaN, +inf or an all -inf row is an error
    bool finite = false;
    for (std::int64_t i = r * vocab; i < (r + 1) * vocab; ++i) {
      HG_CHECK(!std::isnan(data[i]) && data[i] != std::numeric_limits<float>::infinity(), "sample_rows: logits[",
               r, ", ", i - r * vocab, "] is ", data[i], " (NaN and +inf are not logits)");
      finite |= std::isfinite(data[i]);
    }
    HG_CHECK(finite, "sample_rows: logits row ", r, " is all -inf");
  }
  ThreadPool::global().parallel_for(rows, [&](std::int64_t r) {
    const auto row = static_cast<std::size_t>(r);
    const SamplingParams& p = params[row];
    const RowSample s = sample_row({data + r * vocab, static_cast<std::size_t>(vocab)}, p, steps[row],
                                   has_penalties(p) ? input_tokens[row] : 0, history.row(row),
                                   p.logprobs > 0 ? top.subspan(row * kMaxTopLogprobs, kMaxTopLogprobs)
                                                  : std::span<TokenLogprob>{});
    tokens[row] = s.token;
    logprobs[row] = s.logprob;
  });
}

}  // namespace hydragen::sample
