// The sampling spec of src/sample/sampling.h computed a second way, for the sampling tests:
// the penalties counted from the sequence's tokens (not from a TokenHistory), the vocabulary
// sorted once, the filters walked in double, the filtered distribution made explicit, the
// top-N by a stable sort. Also reports how close the float-summed twins come to a cut (their margins), so
// the CUDA-vs-CPU test only compares rows whose answer rounding cannot change.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hydragen/error.h"
#include "engine/model_runner.h"
#include "sample/sampling.h"

namespace hydragen::sample::reference {

// The row l' of the spec: `prompt` and `generated` are the sequence's tokens before its input
// token `input` (generated or the prompt's last), counted here with a map.
inline std::vector<float> penalized_logits(std::span<const float> raw, const SamplingParams& params,
                                           std::span<const std::int32_t> prompt,
                                           std::span<const std::int32_t> generated, std::int32_t input,
                                           bool input_generated) {
  std::vector<float> l(raw.begin(), raw.end());
  if (!has_penalties(params)) return l;
  std::map<std::int32_t, std::int32_t> held;  // token -> times generated
  for (const std::int32_t t : prompt) held[t] += 0;
  for (const std::int32_t t : generated) held[t] += 1;
  held[input] += input_generated ? 1 : 0;
  for (const auto& [token, count] : held) {
    float v = raw[static_cast<std::size_t>(token)];
    if (params.repetition_penalty != 1.f) v = v > 0.f ? v / params.repetition_penalty : v * params.repetition_penalty;
    if (count > 0) {
      const float frequency = params.frequency_penalty * static_cast<float>(count);
      v -= frequency;
      v -= params.presence_penalty;
    }
    l[static_cast<std::size_t>(token)] = v;
  }
  return l;
}

// The min(n, vocab) largest log-softmax entries: a stable sort by value (-0 = +0), in double.
inline std::vector<std::pair<std::int32_t, double>> top_logprobs(std::span<const float> raw, int n) {
  std::vector<std::int32_t> order(raw.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return raw[static_cast<std::size_t>(a)] > raw[static_cast<std::size_t>(b)];
  });
  const double max = raw[static_cast<std::size_t>(order[0])];
  double sum = 0.0;
  for (const float l : raw) sum += std::exp(l - max);
  std::vector<std::pair<std::int32_t, double>> top;
  for (std::size_t j = 0; j < std::min(order.size(), static_cast<std::size_t>(n)); ++j)
    top.emplace_back(order[j], raw[static_cast<std::size_t>(order[j])] - max - std::log(sum));
  return top;
}

struct FilteredDistribution {
  std::vector<double> probabilities;  // the kept tokens' p, renormalised; 0 for the others
  int kept = 0;                       // tokens with probability > 0
  // Distance from top_p * Z_a to the nearest cumulative mass at a value boundary, / Z_a
  // (infinity when top-p is off).
  double top_p_margin = std::numeric_limits<double>::infinity();
  // No scaled logit lies within one float step of the min-p cut (true when min-p is off).
  bool min_p_clear = true;
};

inline FilteredDistribution filtered_distribution(std::span<const float> raw, const SamplingParams& params) {
  const std::size_t n = raw.size();
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = scaled_logit(raw[i], params.temperature);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return x[a] > x[b]; });
  const float m = x[order[0]];
  const auto p = [&](std::size_t i) { return std::exp(static_cast<double>(x[i]) - m); };

  FilteredDistribution d;
  float tau = -std::numeric_limits<float>::infinity();
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < n) tau = x[order[params.top_k - 1]];
  if (params.min_p > 0.f) {
    const float cut = min_p_threshold(m, params.min_p);
    const float below = std::nextafter(cut, -INFINITY), above = std::nextafter(cut, INFINITY);
    for (const float v : x) d.min_p_clear &= !(v >= below && v <= above);
    tau = std::max(tau, cut);
  }
  if (params.top_p < 1.f) {
    double kept_mass = 0.0;
    for (const std::size_t i : order) {
      if (x[i] >= tau) kept_mass += p(i);
    }
    const double target = static_cast<double>(params.top_p) * kept_mass;
    double mass = 0.0;  // cumulative mass over whole groups of equal values, largest first
    for (std::size_t k = 0; k < n && x[order[k]] >= tau;) {
      const float value = x[order[k]];
      const double before = mass;
      for (; k < n && x[order[k]] == value; ++k) mass += p(order[k]);
      if (mass >= target) {
        d.top_p_margin = std::min(target - before, mass - target) / kept_mass;
        tau = value;
        break;
      }
    }
  }
  d.probabilities.assign(n, 0.0);
  double z = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (x[i] >= tau) z += p(i);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (x[i] >= tau && p(i) > 0.0) {
      d.probabilities[i] = p(i) / z;
      ++d.kept;
    }
  }
  return d;
}

// The token the spec draws from `probabilities` with uniform u (the first index whose running
// sum exceeds u), and the distance from u to the nearest end of that token's interval.
struct ReferenceDraw {
  std::int32_t token = -1;
  double margin = 0.0;
};
inline ReferenceDraw reference_draw(const std::vector<double>& probabilities, double u) {
  double running = 0.0;
  for (std::size_t i = 0; i < probabilities.size(); ++i) {
    if (probabilities[i] <= 0.0) continue;
    const double next = running + probabilities[i];
    if (next > u) return {static_cast<std::int32_t>(i), std::min(u - running, next - u)};
    running = next;
  }
  return {};
}

// log_softmax(raw)[token] in double.
inline double log_softmax64(std::span<const float> raw, std::int32_t token) {
  const double max = *std::max_element(raw.begin(), raw.end());
  double sum = 0.0;
  for (const float l : raw) sum += std::exp(l - max);
  return raw[static_cast<std::size_t>(token)] - max - std::log(sum);
}

}  // namespace hydragen::sample::reference

namespace hydragen::sample::test {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline SamplingParams params(float temperature, std::int32_t top_k = 0, float top_p = 1.f, float min_p = 0.f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

inline Tensor rows_of(const std::vector<std::vector<float>>& rows) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(rows[0].size())},
                           DType::f32);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t i = 0; i < rows[r].size(); ++i) t.data<float>()[r * rows[r].size() + i] = rows[r][i];
  }
  return t;
}

// Random rows: logits ~ 3 N(0, 1) (Box-Muller over the counter hash), a few -inf.
inline std::vector<std::vector<float>> random_rows(int rows, int vocab, std::uint64_t seed) {
  std::vector<std::vector<float>> out(static_cast<std::size_t>(rows),
                                      std::vector<float>(static_cast<std::size_t>(vocab)));
  const std::uint64_t key = stream_key(seed, 0);
  std::uint64_t n = 0;
  for (auto& row : out) {
    for (auto& v : row) {
      const double u1 = 0.5 * (counter_uniform(key, n++) + 1.0) + 1e-9, u2 = counter_uniform(key, n++);
      v = static_cast<float>(3.0 * std::sqrt(-2.0 * std::log(u1)) * std::cos(3.14159265358979 * u2));
    }
    row[static_cast<std::size_t>(n % static_cast<std::uint64_t>(vocab))] = kNegInf;
  }
  return out;
}


// A sequence at a decode step: its prompt and the tokens it generated so far; the step's
// input token is the last of them (the prompt's last at step 0).
struct SequenceTokens {
  std::vector<std::int32_t> prompt, generated;
  std::uint64_t step() const { return generated.size(); }
  std::int32_t input() const { return generated.empty() ? prompt.back() : generated.back(); }
  // The spec's l' for this sequence (reference::penalized_logits over its tokens before the input).
  std::vector<float> penalized(std::span<const float> raw, const SamplingParams& p) const {
    const std::span<const std::int32_t> all_prompt(prompt), all_generated(generated);
    return generated.empty()
               ? reference::penalized_logits(raw, p, all_prompt.first(prompt.size() - 1), {}, input(), false)
               : reference::penalized_logits(raw, p, all_prompt, all_generated.first(generated.size() - 1), input(),
                                             true);
  }
};

// A step's sampling inputs, a row per sequence, the history built as the engine builds it.
struct StepInputs {
  std::vector<SamplingParams> params;
  std::vector<std::uint64_t> steps;
  std::vector<std::int32_t> inputs;
  TokenHistory history;
  void add(const SamplingParams& p, const SequenceTokens& seq) {
    params.push_back(p);
    steps.push_back(seq.step());
    inputs.push_back(seq.input());
    HeldTokens().append_row(p, seq.prompt, seq.generated, seq.step(), history);
  }
};

struct Draws {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<TokenLogprob> top;  // rows x kMaxTopLogprobs, poisoned (-1, NaN) before the call
};

// Samples every row of `logits` [rows, vocab] with its params and steps (and penalty inputs).
inline Draws sample(const Tensor& logits, const std::vector<SamplingParams>& params,
                    const std::vector<std::uint64_t>& steps, const std::vector<std::int32_t>& inputs = {},
                    const TokenHistory& history = {}) {
  Draws d{std::vector<std::int32_t>(params.size(), -1), std::vector<float>(params.size(), NAN),
          std::vector<TokenLogprob>(params.size() * kMaxTopLogprobs, TokenLogprob{-1, NAN})};
  sample_rows(logits, params, steps, inputs, history, d.tokens, d.logprobs, d.top);
  return d;
}
inline Draws sample(const Tensor& logits, const StepInputs& in) {
  return sample(logits, in.params, in.steps, in.inputs, in.history);
}

// `n` draws from one row of logits: seeds 0..n-1 at step `step`, or at the step of `seq`
// with its penalties.
inline std::vector<std::int32_t> draws_by_seed(const std::vector<float>& row, SamplingParams params, int n,
                                               std::uint64_t step = 3, const SequenceTokens* seq = nullptr) {
  const Tensor logits = rows_of(std::vector<std::vector<float>>(static_cast<std::size_t>(n), row));
  StepInputs in;
  for (int r = 0; r < n; ++r) {
    params.seed = static_cast<std::uint64_t>(r);
    if (seq != nullptr) {
      in.add(params, *seq);
    } else {
      in.params.push_back(params);
      in.steps.push_back(step);
    }
  }
  return sample(logits, in).tokens;
}

// The most times one token occurs in `tokens` (a greedy loop repeats one).
inline int most_repeated(const std::vector<std::int32_t>& tokens) {
  std::map<std::int32_t, int> counts;
  int most = 0;
  for (const std::int32_t t : tokens) most = std::max(most, ++counts[t]);
  return most;
}

// Greedy decode steps of three rows (tokens 17-19 at position 0, slots 0-2, attention
// skipped) on `runner`: with no top-N asked nothing comes back; with rows 0 and 2 asking for
// 5 and kMaxTopLogprobs, each row's top-N holds its greedy token first with its logprob, then
// distinct tokens, most likely first.
inline void expect_runner_top_n(engine::ModelRunner& runner, const std::string& label) {
  StepRows rows;
  engine::StepSampling sampling;
  for (int r = 0; r < 3; ++r) {
    rows.tokens.push_back(17 + r);
    rows.positions.push_back(0);
    rows.slots.push_back(r);
    sampling.params.emplace_back();
    sampling.steps.push_back(0);
  }
  auto run = [&runner](const StepRows& step_rows, const engine::StepSampling& step_sampling) {
    engine::StepWork step;
    step.rows = step_rows;
    step.sampling = step_sampling;
    runner.launch(step);
    return runner.collect();
  };
  EXPECT_TRUE(run(rows, sampling).top.empty()) << label << ": no row asked";
  sampling.params[0].logprobs = 5;
  sampling.params[2].logprobs = kMaxTopLogprobs;
  const engine::SampledTokens out = run(rows, sampling);
  ASSERT_EQ(out.top.size(), 3u * kMaxTopLogprobs) << label;
  for (const std::size_t r : {0u, 2u}) {
    const TokenLogprob* top = out.top.data() + r * kMaxTopLogprobs;
    EXPECT_EQ(top[0].token, out.tokens[r]) << label << " row " << r;
    EXPECT_EQ(top[0].logprob, out.logprobs[r]) << label << " row " << r;
    for (int j = 1; j < sampling.params[r].logprobs; ++j) {
      EXPECT_LE(top[j].logprob, top[j - 1].logprob) << label << " row " << r << " entry " << j;
      EXPECT_NE(top[j].token, top[j - 1].token) << label << " row " << r << " entry " << j;
    }
  }
}

// Runs `call` and expects a hydragen::Error whose message holds `words`.
template <class Call>
void expect_error(const Call& call, const std::string& words) {
  try {
    call();
    ADD_FAILURE() << words << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

}  // namespace hydragen::sample::test
