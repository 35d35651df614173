// Forced tokens (GenerationRequest::forced_tokens, SamplingParams::forced_token): scoring given
// continuations. Each forced token's logprob equals log_softmax of the full-sequence forward's
// logits at its position, however the continuations share the context.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda_test_util.h"
#include "engine_test_util.h"
#include "paged_model_util.h"
#include "sample/sampling.h"

namespace hydragen {
namespace {

// log_softmax(logits[row])[token] in double.
double logprob_at(const Tensor& logits, std::int64_t row, std::int32_t token) {
  const std::int64_t vocab = logits.size(1);
  double max = -INFINITY, sum = 0;
  for (std::int64_t i = 0; i < vocab; ++i) max = std::max(max, logits.get(row * vocab + i));
  for (std::int64_t i = 0; i < vocab; ++i) sum += std::exp(logits.get(row * vocab + i) - max);
  return logits.get(row * vocab + token) - max - std::log(sum);
}

TEST(EngineForced, ContinuationLogprobsMatchTheFullSequenceForward) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(7);
  const std::int32_t vocab = static_cast<std::int32_t>(m.config.vocab_size);
  const std::vector<std::int32_t> context = test::random_tokens(rng, 37, vocab);
  const std::vector<std::vector<std::int32_t>> continuations{
      test::random_tokens(rng, 5, vocab), test::random_tokens(rng, 1, vocab), test::random_tokens(rng, 9, vocab)};
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged}) {
    std::vector<engine::GenerationRequest> requests;
    for (const auto& c : continuations) {
      engine::GenerationRequest r = test::greedy_request(context, static_cast<std::int64_t>(c.size()));
      r.forced_tokens = c;
      r.sampling.temperature = 0.8f;  // ignored: the token is forced
      requests.push_back(r);
    }
    const auto runner = test::cpu_runner(m);
    const std::vector<engine::Completion> got = test::run_engine(*runner, requests, test::with(mode));
    ASSERT_EQ(got.size(), continuations.size());
    const Llama model(m.config, m.weights);
    for (std::size_t i = 0; i < continuations.size(); ++i) {
      std::vector<std::int32_t> full = context;
      full.insert(full.end(), continuations[i].begin(), continuations[i].end());
      test::CpuStepper stepper(model);
      const Tensor logits = test::paged_logits(stepper, AttentionMode::paged, full);
      ASSERT_EQ(got[i].tokens, continuations[i]) << mode_name(mode);
      ASSERT_EQ(got[i].logprobs.size(), continuations[i].size());
      for (std::size_t j = 0; j < continuations[i].size(); ++j) {
        const auto row = static_cast<std::int64_t>(context.size() + j) - 1;
        EXPECT_NEAR(got[i].logprobs[j], logprob_at(logits, row, continuations[i][j]), 1e-5)
            << mode_name(mode) << " continuation " << i << " token " << j;
      }
    }
  }
}

TEST(EngineForced, ABadForcedRequestFailsAloneNamingTheField) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  engine::GenerationRequest wrong_count = test::greedy_request({1, 2, 3}, 4);
  wrong_count.forced_tokens = {5, 6};
  engine::GenerationRequest outside = test::greedy_request({1, 2, 3}, 1);
  outside.forced_tokens = {static_cast<std::int32_t>(m.config.vocab_size)};
  const auto runner = test::cpu_runner(m);
  const std::vector<engine::Completion> got = test::run_engine(*runner, {wrong_count, outside});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NE(got[0].error.find("forced tokens need n = 1 and max_new_tokens = their count (2)"), std::string::npos)
      << got[0].error;
  EXPECT_NE(got[1].error.find("forced token 0"), std::string::npos) << got[1].error;
}

// The CUDA runner's forced tokens (the device sampler's twin, fed on the device between
// overlapped steps, replayed from graphs): the continuations' tokens, logprobs within bf16 of the CPU's.
TEST(EngineForced, TheCudaRunnerForcesTheSameTokens) {
  SKIP_WITHOUT_GPU();
  const test::FixtureModel m = test::load_fixture_model("tiny-llama-d64");
  std::mt19937 rng(3);
  const std::vector<std::int32_t> context = test::random_tokens(rng, 90, 512);
  std::vector<engine::GenerationRequest> requests;
  for (std::int64_t n : {12, 3, 20}) {
    engine::GenerationRequest r = test::greedy_request(context, n);
    r.forced_tokens = test::random_tokens(rng, n, 512);
    requests.push_back(r);
  }
  const auto cpu = test::cpu_runner(m);
  const std::vector<engine::Completion> want = test::run_engine(*cpu, requests);
  engine::RunnerOptions options;
  options.kv_pages = 256;
  options.page_size = 16;
  options.max_batch = 16;
  const auto cuda = engine::make_cuda_runner(m.config, m.weights, options);
  const std::vector<engine::Completion> got = test::run_engine(*cuda, requests);
  ASSERT_EQ(got.size(), want.size());
  // bf16 against fp32: the logprobs as one vector within the CUDA logits tests' bound (2e-2
  // relative); a forced token deep in the tail can be 0.1 off alone.
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens, requests[i].forced_tokens) << "continuation " << i;
    ASSERT_EQ(got[i].logprobs.size(), want[i].logprobs.size()) << "continuation " << i;
    for (std::size_t j = 0; j < got[i].logprobs.size(); ++j) {
      EXPECT_TRUE(std::isfinite(got[i].logprobs[j])) << "continuation " << i << " token " << j;
      diff += std::pow(double{got[i].logprobs[j]} - want[i].logprobs[j], 2);
      norm += std::pow(double{want[i].logprobs[j]}, 2);
    }
  }
  EXPECT_LE(std::sqrt(diff / norm), 2e-2) << "relative error of the forced tokens' logprobs";
}

TEST(SamplingForced, TheForcedTokenAndItsLogprob) {
  std::vector<float> row{0.5f, 2.f, -1.f, 0.25f};
  const Tensor logits = Tensor::wrap(row.data(), {1, 4}, DType::f32);
  sample::SamplingParams p;
  p.temperature = 1.f;
  p.forced_token = 2;
  std::vector<std::int32_t> token(1);
  std::vector<float> logprob(1);
  sample::sample_rows(logits, {&p, 1}, std::vector<std::uint64_t>{0}, {}, {}, token, logprob, {});
  EXPECT_EQ(token[0], 2);
  EXPECT_NEAR(logprob[0], logprob_at(logits, 0, 2), 1e-6);
  p.forced_token = 4;
  EXPECT_THROW(sample::sample_rows(logits, {&p, 1}, std::vector<std::uint64_t>{0}, {}, {}, token, logprob, {}), Error);
}

}  // namespace
}  // namespace hydragen
