// The CPU sampler (src/sample/sampling.h): greedy, each filter and their combination on
// hand-made logits whose kept set is known, determinism of (seed, step), validation (every
// field, the penalty inputs), the logprobs, agreement with the double-precision spec
// (sampling_test_util.h), and chi-square fits of 20000 draws to the filtered distributions,
// with penalties too. Penalties and top-N in detail: test_sampling_penalties.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
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

using test::Draws;
using test::draws_by_seed;
using test::expect_error;
using test::kNegInf;
using test::params;
using test::random_rows;
using test::rows_of;
using test::sample;

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
  const auto with = [](auto set) {
    SamplingParams p = params(1.f);
    set(p);
    return p;
  };
  validate(with([](SamplingParams& p) { p.presence_penalty = -2.f, p.frequency_penalty = 2.f; }));
  validate(with([](SamplingParams& p) { p.repetition_penalty = 0.01f, p.logprobs = kMaxTopLogprobs; }));
  for (const float bad : {-2.01f, 2.5f, NAN, INFINITY}) {
    expect_invalid(with([&](SamplingParams& p) { p.presence_penalty = bad; }), "presence_penalty");
    expect_invalid(with([&](SamplingParams& p) { p.frequency_penalty = bad; }), "frequency_penalty");
  }
  for (const float bad : {0.f, -1.f, NAN, INFINITY})
    expect_invalid(with([&](SamplingParams& p) { p.repetition_penalty = bad; }), "repetition_penalty");
  for (const int bad : {-1, kMaxTopLogprobs + 1})
    expect_invalid(with([&](SamplingParams& p) { p.logprobs = bad; }), "logprobs");
}

TEST(Sampling, SampleRowsRejectsBadArguments) {
  const Tensor logits = rows_of({{0.f, 1.f}, {1.f, 0.f}});
  std::vector<std::int32_t> tokens(2);
  std::vector<float> logprobs(2);
  std::vector<TokenLogprob> top;
  const std::vector<std::uint64_t> steps{0, 0};
  const std::vector<std::int32_t> inputs{1, 0};
  const TokenHistory none;
  std::vector<SamplingParams> ok(2, params(1.f));
  std::vector<SamplingParams> bad = ok;
  bad[1].top_p = 0.f;
  const auto call = [&](const Tensor& l, std::span<const SamplingParams> p, std::span<const std::int32_t> in,
                        const TokenHistory& h, std::span<std::int32_t> t, std::span<TokenLogprob> n) {
    sample_rows(l, p, steps, in, h, t, logprobs, n);
  };
  expect_error([&] { call(logits, bad, {}, none, tokens, top); }, "params[1]: SamplingParams: top_p");
  expect_error([&] { call(logits, std::span(ok).first(1), {}, none, tokens, top); }, "one entry per row");
  expect_error([&] { call(logits, ok, {}, none, std::span(tokens).first(1), top); }, "one entry per row");
  expect_error([&] { call(logits.to(DType::bf16), ok, {}, none, tokens, top); }, "logits must be");
  expect_error([&] { call(rows_of({{0.f, NAN}, {0.f, 0.f}}), ok, {}, none, tokens, top); }, "logits[0, 1]");
  expect_error([&] { call(rows_of({{0.f, 0.f}, {kNegInf, kNegInf}}), ok, {}, none, tokens, top); },
               "row 1 is all -inf");

  std::vector<SamplingParams> asking = ok;  // top-N and penalties need their arrays
  asking[0].logprobs = 2;
  expect_error([&] { call(logits, asking, {}, none, tokens, top); }, "need top of rows x 20 = 40 entries, got 0");
  std::vector<SamplingParams> penalized = ok;
  penalized[1].frequency_penalty = 0.5f;
  expect_error([&] { call(logits, penalized, {}, none, tokens, top); }, "need one input token per row");
  expect_error([&] { call(logits, penalized, std::vector<std::int32_t>{0, 2}, none, tokens, top); },
               "input_tokens[1] = 2 is outside the vocabulary [0, 2)");
  const auto history = [](std::vector<std::int32_t> offsets, std::vector<TokenCount> entries) {
    return TokenHistory{std::move(offsets), std::move(entries)};
  };
  expect_error([&] { call(logits, penalized, inputs, history({0, 1}, {{0, 1}}), tokens, top); },
               "offsets must be rows + 1 = 3 entries");
  expect_error([&] { call(logits, penalized, inputs, history({0, 1, 1}, {{0, 1}, {1, 1}}), tokens, top); },
               "offsets must be rows + 1 = 3 entries from 0 to entries.size() = 2");
  expect_error([&] { call(logits, penalized, inputs, history({0, 0, 2}, {{1, 1}, {1, 2}}), tokens, top); },
               "row 1's tokens must be strictly increasing, got 1 after 1");
  expect_error([&] { call(logits, penalized, inputs, history({0, 0, 1}, {{2, 1}}), tokens, top); },
               "row 1 holds token 2, outside the vocabulary [0, 2)");
  expect_error([&] { call(logits, penalized, inputs, history({0, 1, 1}, {{0, -1}}), tokens, top); },
               "row 0 token 0 has generated count -1");
  expect_error([&] { call(logits, penalized, inputs, history({}, {{0, 1}}), tokens, top); },
               "1 entries without offsets");
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

// Penalties with temperature and filters: the draws fit the reference's penalized row l'
// (counted from the sequence's tokens) and not the unpenalized one.
TEST(SamplingChiSquare, DrawsFitThePenalizedDistribution) {
  const std::vector<float> twelve{2.0f, 1.2f, 0.3f, -0.5f, 1.7f, -1.0f, 0.9f, 0.0f, -2.0f, 1.5f, -0.2f, 0.6f};
  const test::SequenceTokens seq{{0, 4, 9, 4}, {1, 0, 0, 6, 1}};
  const auto with_penalties = [](SamplingParams p, float presence, float frequency, float repetition) {
    p.presence_penalty = presence;
    p.frequency_penalty = frequency;
    p.repetition_penalty = repetition;
    return p;
  };
  const std::vector<SamplingParams> cases{with_penalties(params(0.7f), 0.3f, 0.4f, 1.3f),
                                          with_penalties(params(1.f, 6), 0.f, -0.5f, 1.f),
                                          with_penalties(params(0.9f, 0, 0.8f), 0.f, 0.f, 0.7f)};
  constexpr int n = 20000;
  for (const SamplingParams& p : cases) {
    const auto label = "presence " + ::testing::PrintToString(p.presence_penalty) + " frequency " +
                       ::testing::PrintToString(p.frequency_penalty) + " repetition " +
                       ::testing::PrintToString(p.repetition_penalty);
    std::vector<int> counts(twelve.size(), 0);
    for (const std::int32_t t : draws_by_seed(twelve, p, n, 0, &seq)) ++counts[static_cast<std::size_t>(t)];
    const auto expected = reference::filtered_distribution(seq.penalized(twelve, p), p);
    const ChiSquare fit = chi_square(counts, expected.probabilities, n);
    EXPECT_LT(fit.statistic, critical_0999(fit.degrees)) << label << ": " << fit.degrees << " degrees";
    EXPECT_FALSE(fits(counts, reference::filtered_distribution(twelve, p).probabilities, n)) << label;
  }
}

}  // namespace
}  // namespace hydragen::sample
