// The CPU sampler's penalties and top-N logprobs (src/sample/sampling.h): the penalty formula,
// each penalty moving the greedy token on hand-made rows (and which tokens it counts: the
// prompt, the generated ones, the step's input token), the history rows the engine builds,
// the top-N against a sort of log_softmax (ties), and reproducible draws with penalties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <vector>

#include "hydragen/error.h"
#include "sample/sampling.h"
#include "sampling_test_util.h"

namespace hydragen::sample {
namespace {

using test::expect_error;
using test::kNegInf;
using test::params;
using test::rows_of;
using test::SequenceTokens;
using test::StepInputs;

SamplingParams penalties(float presence, float frequency, float repetition, float temperature = 0.f) {
  SamplingParams p = params(temperature);
  p.presence_penalty = presence;
  p.frequency_penalty = frequency;
  p.repetition_penalty = repetition;
  return p;
}

TEST(SamplingPenalties, PenalizedLogitFollowsTheFormula) {
  EXPECT_EQ(penalized_logit(3.f, 0, penalties(0.f, 0.f, 2.f)), 1.5f);   // positive: divided
  EXPECT_EQ(penalized_logit(-3.f, 0, penalties(0.f, 0.f, 2.f)), -6.f);  // negative: multiplied
  EXPECT_EQ(penalized_logit(3.f, 4, penalties(0.f, 0.f, 0.5f)), 6.f);   // r < 1 encourages
  EXPECT_EQ(penalized_logit(1.f, 3, penalties(0.f, 0.5f, 1.f)), -0.5f);  // - frequency * count
  EXPECT_EQ(penalized_logit(1.f, 3, penalties(0.25f, 0.f, 1.f)), 0.75f);  // - presence, once
  EXPECT_EQ(penalized_logit(1.f, 0, penalties(0.25f, 0.5f, 1.f)), 1.f);   // not generated: neither
  EXPECT_EQ(penalized_logit(2.f, 2, penalties(0.25f, 0.5f, 2.f)), -0.25f);  // 2 / 2 - 0.5 * 2 - 0.25
  EXPECT_EQ(penalized_logit(-1.f, 1, penalties(-1.f, -2.f, 1.f)), 2.f);  // negative penalties add
  EXPECT_EQ(penalized_logit(kNegInf, 5, penalties(1.f, 1.f, 0.5f)), kNegInf);  // masked stays masked
  // Extreme repetition penalties saturate at the largest float instead of reaching infinity.
  EXPECT_EQ(penalized_logit(10.f, 0, penalties(0.f, 0.f, 1e-38f)), FLT_MAX);
  EXPECT_EQ(penalized_logit(-10.f, 0, penalties(0.f, 0.f, 1e38f)), -FLT_MAX);
  EXPECT_FALSE(has_penalties(params(1.f)));
  EXPECT_TRUE(has_penalties(penalties(0.f, 0.f, 1.01f)));
}

// The greedy token of `raw` for `seq` under `p`, checked against the reference's l'.
std::int32_t greedy_token(const std::vector<float>& raw, const SamplingParams& p, const SequenceTokens& seq) {
  StepInputs in;
  in.add(p, seq);
  const std::int32_t token = test::sample(rows_of({raw}), in).tokens[0];
  const std::vector<float> l = seq.penalized(raw, p);
  EXPECT_EQ(token, std::max_element(l.begin(), l.end()) - l.begin()) << "the reference disagrees";
  return token;
}

TEST(SamplingPenalties, FrequencyScalesWithTheGeneratedCount) {
  const std::vector<float> raw{1.0f, 0.9f, 0.0f, 0.2f};
  const SequenceTokens once{{2, 3}, {0, 3}}, twice{{2, 3}, {0, 0, 3}};
  EXPECT_EQ(greedy_token(raw, penalties(0.f, 0.f, 1.f), once), 0);
  EXPECT_EQ(greedy_token(raw, penalties(0.f, 0.05f, 1.f), once), 0);  // 0.95 > 0.9
  EXPECT_EQ(greedy_token(raw, penalties(0.f, 0.2f, 1.f), once), 1);   // 0.8 < 0.9
  EXPECT_EQ(greedy_token(raw, penalties(0.f, 0.06f, 1.f), once), 0);  // 0.94
  EXPECT_EQ(greedy_token(raw, penalties(0.f, 0.06f, 1.f), twice), 1);  // 0.88
}

TEST(SamplingPenalties, PresenceCountsATokenOnce) {
  const std::vector<float> raw{1.0f, 0.9f, 0.0f, 0.2f};
  const SequenceTokens thrice{{2}, {0, 0, 0, 3}};
  EXPECT_EQ(greedy_token(raw, penalties(0.05f, 0.f, 1.f), thrice), 0);  // 0.95, however often
  EXPECT_EQ(greedy_token(raw, penalties(0.15f, 0.f, 1.f), thrice), 1);  // 0.85
}

TEST(SamplingPenalties, RepetitionCountsThePromptAndTheOthersDoNot) {
  const SequenceTokens prompt_only{{0, 3}, {}};  // token 0 held by the prompt alone
  const std::vector<float> positive{2.0f, 1.5f, -1.0f, -1.2f};
  EXPECT_EQ(greedy_token(positive, penalties(0.f, 0.f, 1.5f), prompt_only), 1);  // 2 / 1.5 < 1.5
  EXPECT_EQ(greedy_token(positive, penalties(2.f, 2.f, 1.f), prompt_only), 0);   // never generated
  const std::vector<float> negative{-1.0f, -1.2f, -5.f, -5.f};
  EXPECT_EQ(greedy_token(negative, penalties(0.f, 0.f, 1.5f), prompt_only), 1);  // -1 * 1.5 < -1.2
  EXPECT_EQ(greedy_token(negative, penalties(0.f, 0.f, 1.1f), prompt_only), 0);  // -1.1 > -1.2
}

TEST(SamplingPenalties, TheInputTokenIsHeldAndCountedWhenGenerated) {
  const std::vector<float> raw{1.0f, 0.9f};
  // Step 0: the input is the prompt's last token: held (repetition), never generated.
  const SequenceTokens first{{0}, {}};
  EXPECT_EQ(greedy_token(raw, penalties(0.f, 0.5f, 1.f), first), 0);
  EXPECT_EQ(greedy_token(raw, penalties(0.5f, 0.f, 1.f), first), 0);
  EXPECT_EQ(greedy_token(raw, penalties(0.f, 0.f, 2.f), first), 1);
  // Later steps: the input is the last generated token, once more than the history says.
  const SequenceTokens later{{1}, {0}}, again{{1}, {0, 0}};
  EXPECT_EQ(greedy_token(raw, penalties(0.f, 0.5f, 1.f), later), 1);
  EXPECT_EQ(greedy_token(raw, penalties(0.f, 0.06f, 1.f), later), 0);  // 0.94
  EXPECT_EQ(greedy_token(raw, penalties(0.f, 0.06f, 1.f), again), 1);  // 0.88: the history's 1 + the input
}

TEST(SamplingPenalties, RowsWithoutPenaltiesIgnoreTheirHistory) {
  const std::vector<float> raw{1.0f, 0.9f};
  const Tensor logits = rows_of({raw});
  const TokenHistory held{{0, 1}, {{0, 50}}};
  EXPECT_EQ(test::sample(logits, {params(0.f)}, {3}, {0}, held).tokens[0], 0);
  EXPECT_EQ(test::sample(logits, {penalties(0.f, 0.1f, 1.f)}, {3}, {1}, held).tokens[0], 1);
}

using Row = std::vector<std::pair<std::int32_t, std::int32_t>>;
Row row_of(const TokenHistory& h, std::size_t r) {
  Row out;
  for (const TokenCount& e : h.row(r)) out.emplace_back(e.token, e.generated);
  return out;
}

TEST(SamplingPenalties, HeldTokensAreTheTokensBeforeTheInput) {
  const std::vector<std::int32_t> prompt{5, 6, 5}, generated{7, 5, 7, 8};
  const auto row = [&](const SamplingParams& p, std::span<const std::int32_t> gen, std::uint64_t step) {
    TokenHistory h;
    HeldTokens().append_row(p, prompt, gen, step, h);
    EXPECT_EQ(h.offsets.size(), 2u);
    return row_of(h, 0);
  };
  const SamplingParams frequency = penalties(0.f, 0.5f, 1.f), repetition = penalties(0.f, 0.f, 1.2f);
  EXPECT_EQ(row(params(1.f), generated, 4), Row{});
  EXPECT_EQ(row(frequency, generated, 4), (Row{{5, 1}, {7, 2}}));  // 8, the input, left out
  EXPECT_EQ(row(repetition, generated, 4), (Row{{5, 1}, {6, 0}, {7, 2}}));
  EXPECT_EQ(row(repetition, std::span(generated).first(3), 4), (Row{{5, 1}, {6, 0}, {7, 2}}));  // overlapped
  EXPECT_EQ(row(repetition, {}, 0), (Row{{5, 0}, {6, 0}}));  // the prompt's last is the input
  EXPECT_EQ(row(frequency, {}, 0), Row{});
  EXPECT_EQ(row(frequency, generated, 1), Row{});  // the first generated token is the input
  expect_error([&] { row(frequency, std::span(generated).first(3), 5); },
               "decode step 5 needs 4 generated tokens, got 3");

  TokenHistory rows;  // rows append one after another
  HeldTokens a, b, c;
  a.append_row(frequency, prompt, generated, 4, rows);
  b.append_row(params(1.f), prompt, generated, 4, rows);
  c.append_row(repetition, prompt, {}, 0, rows);
  EXPECT_EQ(rows.offsets, (std::vector<std::int32_t>{0, 2, 2, 4}));
  EXPECT_NO_THROW(validate_history(rows, 3, 9));
}

// One HeldTokens kept across a sequence's steps (step by step, overlapped: the step's input
// not yet generated, and a count that goes back) gives every step the row a fresh one gives.
TEST(SamplingPenalties, HeldTokensCountedAsTheSequenceGrowsEqualAFreshCount) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<std::int32_t> token(0, 30);
  std::vector<std::int32_t> prompt(50), generated;
  for (auto& t : prompt) t = token(rng);
  for (const SamplingParams& p : {penalties(0.f, 0.5f, 1.f), penalties(0.f, 0.f, 1.3f), penalties(0.2f, 0.2f, 0.9f)}) {
    HeldTokens kept;
    generated.clear();
    for (std::uint64_t step = 0; step < 60; ++step) {
      const bool overlapped = step % 3 == 2;  // the input of this step still in flight
      const std::span<const std::int32_t> known = std::span(generated).first(overlapped ? step - 1 : step);
      TokenHistory incremental, fresh;
      kept.append_row(p, prompt, known, step, incremental);
      HeldTokens().append_row(p, prompt, known, step, fresh);
      ASSERT_EQ(row_of(incremental, 0), row_of(fresh, 0)) << "step " << step;
      if (step == 40) {  // back to an earlier step: counted over
        TokenHistory again, earlier;
        kept.append_row(p, prompt, std::span(generated).first(10), 10, again);
        HeldTokens().append_row(p, prompt, std::span(generated).first(10), 10, earlier);
        ASSERT_EQ(row_of(again, 0), row_of(earlier, 0));
      }
      generated.push_back(token(rng));
    }
  }
}

TEST(SamplingPenalties, SameSeedStepAndHistoryGiveTheSameToken) {
  const std::vector<float> flat(1000, 0.f);
  const SequenceTokens seq{{1, 2, 3, 4}, {10, 11, 10, 12, 10}};
  SamplingParams p = penalties(0.3f, 0.4f, 1.3f, 1.f);
  p.seed = 77;
  StepInputs in;
  for (int r = 0; r < 64; ++r) in.add(p, seq);
  const Tensor logits = rows_of(std::vector<std::vector<float>>(64, flat));
  const auto a = test::sample(logits, in), b = test::sample(logits, in);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(std::set<std::int32_t>(a.tokens.begin(), a.tokens.end()).size(), 1u) << "rows of one input differ";
  // A strongly encouraged token is drawn by every seed: the penalties reach the draw.
  const SamplingParams encourage = penalties(-2.f, -2.f, 1.f, 0.25f);
  for (const std::int32_t t : test::draws_by_seed(flat, encourage, 200, 0, &seq)) EXPECT_EQ(t, 10);
}

// ---- top-N logprobs ---------------------------------------------------------------------

// Row r's top-N against the reference sort; the slots past min(N, vocab) stay poisoned.
void expect_top_matches(const std::vector<float>& raw, const SamplingParams& p, const test::Draws& d, std::size_t r,
                        const std::string& label) {
  const auto expected = reference::top_logprobs(raw, p.logprobs);
  const TokenLogprob* top = d.top.data() + r * kMaxTopLogprobs;
  for (std::size_t j = 0; j < expected.size(); ++j) {
    EXPECT_EQ(top[j].token, expected[j].first) << label << " entry " << j;
    if (std::isinf(expected[j].second)) EXPECT_EQ(top[j].logprob, expected[j].second) << label << " entry " << j;
    else EXPECT_NEAR(top[j].logprob, expected[j].second, 1e-5) << label << " entry " << j;
    if (top[j].token == d.tokens[r]) EXPECT_EQ(top[j].logprob, d.logprobs[r]) << label << ": the sampled token's";
  }
  for (std::size_t j = expected.size(); j < kMaxTopLogprobs; ++j)
    EXPECT_EQ(top[j].token, -1) << label << " entry " << j << " past N is written";
}

TEST(SamplingTopLogprobs, EqualASortOfLogSoftmaxWithTiesByTheLowestIndex) {
  // Quantised rows (quarters): ties everywhere, at the N-th place too.
  auto rows = test::random_rows(24, 300, 5);
  for (auto& row : rows)
    for (float& v : row) v = std::round(4.f * v) / 4.f;
  StepInputs in;
  const int ns[] = {1, 2, 5, 20};
  for (std::size_t r = 0; r < rows.size(); ++r) {
    SamplingParams p = r % 3 == 0   ? params(0.f)
                       : r % 3 == 1 ? params(0.8f, 40, 0.9f)
                                    : penalties(0.5f, 0.5f, 1.3f, 1.f);
    p.logprobs = r % 5 == 4 ? 0 : ns[r % 4];
    p.seed = r;
    in.add(p, SequenceTokens{{1, 2, 3}, {static_cast<std::int32_t>(r), 7}});
  }
  const test::Draws d = test::sample(rows_of(rows), in);
  for (std::size_t r = 0; r < rows.size(); ++r)
    expect_top_matches(rows[r], in.params[r], d, r, "row " + std::to_string(r));

  // Fewer tokens than N; -0 equals +0; -inf tokens come last when nothing else is left.
  const std::vector<std::vector<float>> small{{0.f, -0.f, 0.f, -1.f, 0.5f, -0.f, 2.f},
                                              {kNegInf, 1.f, kNegInf, -2.f, 0.f, 0.f, 0.f}};
  SamplingParams twenty = params(1.f);
  twenty.logprobs = 20;
  const test::Draws s = test::sample(rows_of(small), {twenty, twenty}, {0, 1});
  for (std::size_t r = 0; r < small.size(); ++r)
    expect_top_matches(small[r], twenty, s, r, "small row " + std::to_string(r));
  EXPECT_EQ(s.top[0].token, 6);
  EXPECT_EQ(s.top[1].token, 4);
  EXPECT_EQ(s.top[2].token, 0);  // 0, -0, 0, -0 in index order
  EXPECT_EQ(s.top[3].token, 1);
  EXPECT_EQ(s.top[kMaxTopLogprobs + 5].token, 0);  // the first -inf
  EXPECT_EQ(s.top[kMaxTopLogprobs + 5].logprob, kNegInf);
}

}  // namespace
}  // namespace hydragen::sample
