// The CPU sampler (src/sample/sampling.h): greedy, each filter and their combination on
// hand-made logits whose kept set is known, determinism of (seed, step), validation, the
// logprobs, agreement with the double-precision spec (sampling_test_util.h), and chi-square
// fits of 20000 draws to the filtered distributions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "hydragen/error.h"
#include "core/counter_rng.h"
#include "sample/sampling.h"
#include "sampling_test_util.h"

namespace hydragen::sample {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Draws {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
};

// Samples every row of `logits` [rows, vocab] with its params and steps.
Draws sample(const Tensor& logits, const std::vector<SamplingParams>& params, const std::vector<std::uint64_t>& steps) {
  Draws d{std::vector<std::int32_t>(params.size(), -1), std::vector<float>(params.size(), NAN)};
  sample_rows(logits, params, steps, d.tokens, d.logprobs);
  return d;
}

Tensor rows_of(const std::vector<std::vector<float>>& rows) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(rows[0].size())},
                           DType::f32);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t i = 0; i < rows[r].size(); ++i) t.data<float>()[r * rows[r].size() + i] = rows[r][i];
  }
  return t;
}

// `n` draws from one row of logits: seeds 0..n-1 at step `step`.
std::vector<std::int32_t> draws_by_seed(const std::vector<float>& row, SamplingParams params, int n,
                                        std::uint64_t step = 3) {
  const Tensor logits = rows_of(std::vector<std::vector<float>>(static_cast<std::size_t>(n), row));
  std::vector<SamplingParams> per_row(static_cast<std::size_t>(n), params);
  for (int r = 0; r < n; ++r) per_row[static_cast<std::size_t>(r)].seed = static_cast<std::uint64_t>(r);
  return sample(logits, per_row, std::vector<std::uint64_t>(static_cast<std::size_t>(n), step)).tokens;
}

std::set<std::int32_t> kept_by_sampling(const std::vector<float>& row, SamplingParams params) {
  const std::vector<std::int32_t> tokens = draws_by_seed(row, params, 4000);
  return {tokens.begin(), tokens.end()};
}

// Probabilities 0.30, 0.25, 0.15, 0.12, 0.08, 0.05, 0.03, 0.02 at tokens 1, 4, 3, 6, 0, 7, 2, 5:
// at temperature 1 the filters cut at known places.
std::vector<float> known_logits() {
  const std::vector<double> p{0.08, 0.30, 0.03, 0.15, 0.25, 0.02, 0.12, 0.05};
  std::vector<float> logits;
  for (const double v : p) logits.push_back(static_cast<float>(std::log(v)));
  return logits;
}

SamplingParams params(float temperature, std::int32_t top_k = 0, float top_p = 1.f, float min_p = 0.f) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

TEST(Sampling, GreedyIsArgmaxWithTheLowestIndexOnTies) {
  const Tensor logits = rows_of({{0.1f, 0.5f, 0.5f, -1.f}, {3.f, 3.f, 2.f, 3.f}, {kNegInf, -2.f, kNegInf, -3.f}});
  SamplingParams filtered = params(0.f, 1, 0.1f, 0.5f);  // filters and seed do not matter when greedy
  filtered.seed = 99;
  const Draws d = sample(logits, {params(0.f), params(0.f), filtered}, {0, 5, 7});
  EXPECT_EQ(d.tokens, (std::vector<std::int32_t>{1, 0, 1}));
}

TEST(Sampling, TemperatureAloneKeepsEveryToken) {
  EXPECT_EQ(kept_by_sampling(known_logits(), params(1.f)), (std::set<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(Sampling, TopKKeepsTheKLargestAndTiesAtTheKth) {
  EXPECT_EQ(kept_by_sampling(known_logits(), params(1.f, 3)), (std::set<std::int32_t>{1, 3, 4}));
  EXPECT_EQ(kept_by_sampling({2.f, 1.f, 1.f, 1.f, 0.f, -1.f}, params(1.f, 2)), (std::set<std::int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(kept_by_sampling({0.f, 0.5f, -0.5f}, params(1.f, 3)), (std::set<std::int32_t>{0, 1, 2}));  // k >= vocab
  EXPECT_EQ(kept_by_sampling(known_logits(), params(0.6f, 1)), (std::set<std::int32_t>{1}));
}

TEST(Sampling, MinPKeepsTokensAtLeastAFractionOfTheMax) {
  // 0.3 * 0.30 = 0.09: 0.12 stays, 0.08 goes.
  EXPECT_EQ(kept_by_sampling(known_logits(), params(1.f, 0, 1.f, 0.3f)), (std::set<std::int32_t>{1, 3, 4, 6}));
  EXPECT_EQ(kept_by_sampling(known_logits(), params(1.f, 0, 1.f, 1.f)), (std::set<std::int32_t>{1}));
}

TEST(Sampling, TopPKeepsTheSmallestNucleusAndTiesAtTheCut) {
  // Cumulative 0.30, 0.55 >= 0.5.
  EXPECT_EQ(kept_by_sampling(known_logits(), params(1.f, 0, 0.5f)), (std::set<std::int32_t>{1, 4}));
  // 0.30, 0.55, 0.70, 0.82 >= 0.75.
  EXPECT_EQ(kept_by_sampling(known_logits(), params(1.f, 0, 0.75f)), (std::set<std::int32_t>{1, 3, 4, 6}));
  // p = e, 1, 1, e^-5 (Z = 4.72): e < 0.7 Z, the tie group of 1s crosses it and stays whole.
  EXPECT_EQ(kept_by_sampling({1.f, 0.f, 0.f, -5.f}, params(1.f, 0, 0.7f)), (std::set<std::int32_t>{0, 1, 2}));
}

TEST(Sampling, TopPIsTakenOverWhatTopKAndMinPLeft) {
  // top-k 3 leaves Z_a = 0.70; 0.75 Z_a = 0.525 is crossed at 0.55 (top-p alone keeps four).
  EXPECT_EQ(kept_by_sampling(known_logits(), params(1.f, 3, 0.75f)), (std::set<std::int32_t>{1, 4}));
  // min-p 0.45 (cut 0.135) leaves 0.70 as well.
  EXPECT_EQ(kept_by_sampling(known_logits(), params(1.f, 0, 0.75f, 0.45f)), (std::set<std::int32_t>{1, 4}));
  // top-k 5 then min-p 0.3 leave 0.82; 0.75 of it = 0.615 is crossed at 0.70: three tokens,
  // where each filter alone keeps five, four and four.
  EXPECT_EQ(kept_by_sampling(known_logits(), params(1.f, 5, 0.75f, 0.3f)), (std::set<std::int32_t>{1, 3, 4}));
}

TEST(Sampling, SameSeedAndStepGiveTheSameToken) {
  const std::vector<float> flat(1000, 0.f);  // uniform over 1000 tokens
  SamplingParams p = params(1.f);
  p.seed = 1234;
  const Tensor logits = rows_of(std::vector<std::vector<float>>(64, flat));
  const Draws a = sample(logits, std::vector<SamplingParams>(64, p), std::vector<std::uint64_t>(64, 17));
  const Draws b = sample(logits, std::vector<SamplingParams>(64, p), std::vector<std::uint64_t>(64, 17));
  EXPECT_EQ(std::set<std::int32_t>(a.tokens.begin(), a.tokens.end()).size(), 1u) << "rows of one (seed, step) differ";
  EXPECT_EQ(a.tokens, b.tokens);

  const std::vector<std::int32_t> by_seed = draws_by_seed(flat, params(1.f), 200);
  EXPECT_GE(std::set<std::int32_t>(by_seed.begin(), by_seed.end()).size(), 150u) << "seeds do not vary the draw";
  std::vector<std::uint64_t> steps(200);
  for (std::size_t s = 0; s < steps.size(); ++s) steps[s] = s;
  const Draws by_step = sample(rows_of(std::vector<std::vector<float>>(200, flat)), std::vector<SamplingParams>(200, p),
                               steps);
  EXPECT_GE(std::set<std::int32_t>(by_step.tokens.begin(), by_step.tokens.end()).size(), 150u)
      << "steps do not vary the draw";
}

TEST(Sampling, UniformIsTheCounterHashIn24Bits) {
  for (std::uint64_t step = 0; step < 1000; ++step) {
    const float u = sampling_uniform(5, step);
    ASSERT_GE(u, 0.f);
    ASSERT_LT(u, 1.f);
    ASSERT_EQ(u * 16777216.f, std::floor(u * 16777216.f)) << "not a multiple of 2^-24";
  }
  EXPECT_NE(sampling_uniform(5, 0), sampling_uniform(6, 0));
}

void expect_invalid(const SamplingParams& p, const std::string& field) {
  try {
    validate(p);
    ADD_FAILURE() << field << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(Sampling, ValidateNamesTheField) {
  validate(params(0.f));
  validate(params(1.5f, 40, 1.f, 1.f));
  validate(params(0.7f, 0, 0.01f, 0.f));
  expect_invalid(params(-0.1f), "temperature");
  expect_invalid(params(NAN), "temperature");
  expect_invalid(params(INFINITY), "temperature");
  expect_invalid(params(1.f, -1), "top_k");
  expect_invalid(params(1.f, 0, 0.f), "top_p");
  expect_invalid(params(1.f, 0, 1.01f), "top_p");
  expect_invalid(params(1.f, 0, NAN), "top_p");
  expect_invalid(params(1.f, 0, 1.f, -0.01f), "min_p");
  expect_invalid(params(1.f, 0, 1.f, 1.5f), "min_p");
  expect_invalid(params(1.f, 0, 1.f, NAN), "min_p");
}

void expect_error(const std::function<void()>& call, const std::string& words) {
  try {
    call();
    ADD_FAILURE() << words << ": no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Sampling, SampleRowsRejectsBadArguments) {
  const Tensor logits = rows_of({{0.f, 1.f}, {1.f, 0.f}});
  std::vector<std::int32_t> tokens(2);
  std::vector<float> logprobs(2);
  const std::vector<std::uint64_t> steps{0, 0};
  std::vector<SamplingParams> ok(2, params(1.f));
  std::vector<SamplingParams> bad = ok;
  bad[1].top_p = 0.f;
  expect_error([&] { sample_rows(logits, bad, steps, tokens, logprobs); }, "params[1]: SamplingParams: top_p");
  expect_error([&] { sample_rows(logits, std::span(ok).first(1), steps, tokens, logprobs); }, "one entry per row");
  expect_error([&] { sample_rows(logits, ok, steps, std::span(tokens).first(1), logprobs); }, "one entry per row");
  expect_error([&] { sample_rows(logits.to(DType::bf16), ok, steps, tokens, logprobs); }, "logits must be");
  expect_error([&] { sample_rows(rows_of({{0.f, NAN}, {0.f, 0.f}}), ok, steps, tokens, logprobs); }, "logits[0, 1]");
  expect_error([&] { sample_rows(rows_of({{0.f, 0.f}, {kNegInf, kNegInf}}), ok, steps, tokens, logprobs); },
               "row 1 is all -inf");
}

// Random rows: logits ~ 3 N(0, 1) (Box-Muller over the counter hash), a few -inf.
std::vector<std::vector<float>> random_rows(int rows, int vocab, std::uint64_t seed) {
  std::vector<std::vector<float>> out(static_cast<std::size_t>(rows), std::vector<float>(static_cast<std::size_t>(vocab)));
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

TEST(Sampling, LogprobsAreTheFloat64LogSoftmaxOfTheRawLogits) {
  const auto rows = random_rows(6, 500, 7);
  const std::vector<SamplingParams> p{params(0.f), params(1.f), params(0.5f, 10), params(2.f, 0, 0.9f),
                                      params(1.f, 0, 1.f, 0.1f), params(0.8f, 50, 0.9f, 0.02f)};
  const Draws d = sample(rows_of(rows), p, {0, 1, 2, 3, 4, 5});
  for (std::size_t r = 0; r < rows.size(); ++r) {
    EXPECT_NEAR(d.logprobs[r], reference::log_softmax64(rows[r], d.tokens[r]), 1e-5) << "row " << r;
  }
}

// The CPU twin against the double-precision spec on random rows, where no cut lies within
// rounding (margins 1e-6; a row whose draw lands closer is skipped).
TEST(Sampling, MatchesTheDoublePrecisionSpec) {
  const int vocab = 2000, rows = 200;
  const auto logits = random_rows(rows, vocab, 11);
  std::vector<SamplingParams> p(rows);
  std::vector<std::uint64_t> steps(rows);
  const float temperatures[] = {0.f, 0.6f, 1.f, 1.5f};
  const std::int32_t top_ks[] = {0, 1, 7, 50, 400};
  const float top_ps[] = {1.f, 0.95f, 0.6f};
  const float min_ps[] = {0.f, 0.02f, 0.3f};
  for (int r = 0; r < rows; ++r) {
    p[r] = params(temperatures[r % 4], top_ks[(r / 4) % 5], top_ps[(r / 20) % 3], min_ps[(r / 60) % 3]);
    p[r].seed = static_cast<std::uint64_t>(1000 + r);
    steps[r] = static_cast<std::uint64_t>(r % 13);
  }
  const Draws d = sample(rows_of(logits), p, steps);
  int compared = 0;
  for (int r = 0; r < rows; ++r) {
    if (p[r].temperature == 0.f) continue;
    const auto f = reference::filtered_distribution(logits[r], p[r]);
    const auto draw = reference::reference_draw(f.probabilities, sampling_uniform(p[r].seed, steps[r]));
    if (f.top_p_margin < 1e-6 || !f.min_p_clear || draw.margin < 1e-6) continue;
    ++compared;
    EXPECT_EQ(d.tokens[r], draw.token) << "row " << r;
  }
  EXPECT_GE(compared, 120);
}

// ---- chi-square -------------------------------------------------------------------------

// Pearson's statistic of `counts` against `expected` probabilities (infinite when a token of
// probability 0 was drawn) and its degrees of freedom.
struct ChiSquare {
  double statistic = 0.0;
  int degrees = -1;
};
ChiSquare chi_square(const std::vector<int>& counts, const std::vector<double>& expected, int n) {
  ChiSquare c;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (expected[i] <= 0.0) {
      if (counts[i] > 0) c.statistic = std::numeric_limits<double>::infinity();
      continue;
    }
    const double e = n * expected[i];
    c.statistic += (counts[i] - e) * (counts[i] - e) / e;
    ++c.degrees;
  }
  return c;
}

// The 0.999 quantile of chi-square with 1..15 degrees of freedom.
double critical_0999(int degrees) {
  static const double table[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124,
                                 27.877, 29.588, 31.264, 32.909, 34.528, 36.123, 37.697};
  EXPECT_GE(degrees, 1);
  EXPECT_LE(degrees, 15);
  return table[degrees - 1];
}

bool fits(const std::vector<int>& counts, const std::vector<double>& expected, int n) {
  const ChiSquare c = chi_square(counts, expected, n);
  return c.degrees >= 1 && c.statistic < critical_0999(c.degrees);
}

std::vector<double> softmax(const std::vector<float>& logits, float temperature) {
  return reference::filtered_distribution(logits, params(temperature)).probabilities;
}

TEST(SamplingChiSquare, DrawsFitTheFilteredDistribution) {
  const std::vector<float> twelve{2.0f, 1.2f, 0.3f, -0.5f, 1.7f, -1.0f, 0.9f, 0.0f, -2.0f, 1.5f, -0.2f, 0.6f};
  const std::vector<float> sixteen{0.4f, -1.3f, 2.2f, 0.4f, 1.1f, -0.6f, 1.9f, 0.0f,
                                   -2.5f, 0.8f, 1.6f, -0.1f, 0.4f, 2.0f, -1.0f, 0.7f};
  struct Case {
    const std::vector<float>* logits;
    SamplingParams params;
    int kept;  // tokens the filters keep (worked out by hand, checked against the reference)
  };
  const std::vector<Case> cases{
      {&twelve, params(0.7f), 12},
      {&twelve, params(0.7f, 5), 5},
      {&twelve, params(0.7f, 0, 0.8f), 4},
      {&twelve, params(0.7f, 0, 1.f, 0.05f), 8},
      {&twelve, params(0.7f, 5, 0.8f, 0.05f), 3},
      {&twelve, params(0.7f, 8, 0.9f, 0.1f), 5},
      {&twelve, params(1.3f, 8), 8},
      {&sixteen, params(0.7f, 0, 0.9f, 0.05f), -1},
      {&sixteen, params(1.f, 10, 0.8f), -1},
  };
  constexpr int n = 20000;
  for (const Case& c : cases) {
    const auto label = ::testing::PrintToString(c.params.temperature) + " k=" + std::to_string(c.params.top_k) +
                       " p=" + ::testing::PrintToString(c.params.top_p) + " min_p=" +
                       ::testing::PrintToString(c.params.min_p) + " vocab " + std::to_string(c.logits->size());
    const auto expected = reference::filtered_distribution(*c.logits, c.params);
    if (c.kept > 0) EXPECT_EQ(expected.kept, c.kept) << label;
    std::vector<int> counts(c.logits->size(), 0);
    for (const std::int32_t t : draws_by_seed(*c.logits, c.params, n)) ++counts[static_cast<std::size_t>(t)];
    const ChiSquare fit = chi_square(counts, expected.probabilities, n);
    EXPECT_LT(fit.statistic, critical_0999(fit.degrees)) << label << ": " << fit.degrees << " degrees";
    // The statistic discriminates: the same draws do not fit the unfiltered distribution, nor
    // the filtered one at another temperature.
    const bool filtered = expected.kept < static_cast<int>(c.logits->size());
    if (filtered) EXPECT_FALSE(fits(counts, softmax(*c.logits, c.params.temperature), n)) << label;
    SamplingParams hotter = c.params;
    hotter.temperature *= 1.3f;
    EXPECT_FALSE(fits(counts, reference::filtered_distribution(*c.logits, hotter).probabilities, n)) << label;
  }
}

}  // namespace
}  // namespace hydragen::sample
