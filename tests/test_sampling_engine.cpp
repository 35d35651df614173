// Penalties and top-N through the engine on the tiny fixture model (CPU): greedy decoding
// with penalties equals a reference loop (the whole sequence's logits every step, the
// penalties counted from its tokens by sampling_test_util.h, the argmax); a frequency penalty
// breaks the greedy repetition loop; sampled runs with every penalty give the same tokens with
// overlapped steps on and off and in every attention mode; the runner returns the top-N, and
// the engine carries it into TokenEvent and Completion.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine_test_util.h"
#include "model/llama.h"
#include "paged_model_util.h"
#include "sampling_test_util.h"

namespace hydragen {
namespace {

using engine::GenerationRequest;

GenerationRequest request(std::vector<std::int32_t> prompt, std::int64_t new_tokens, sample::SamplingParams p) {
  GenerationRequest r = test::greedy_request(std::move(prompt), new_tokens);
  r.sampling = p;
  return r;
}

sample::SamplingParams penalties(float presence, float frequency, float repetition) {
  sample::SamplingParams p;
  p.presence_penalty = presence;
  p.frequency_penalty = frequency;
  p.repetition_penalty = repetition;
  return p;
}

// Greedy tokens after `prompt` by the reference: the model's logits over the whole sequence
// each step (dense attention, recomputed from scratch), penalized from the sequence's tokens, argmax.
std::vector<std::int32_t> reference_greedy(const Llama& model, const std::vector<std::int32_t>& prompt,
                                           std::int64_t new_tokens, const sample::SamplingParams& p) {
  sample::test::SequenceTokens seq{prompt, {}};
  const auto vocab = static_cast<std::size_t>(model.config().vocab_size);
  test::CpuStepper stepper(model);
  for (std::int64_t i = 0; i < new_tokens; ++i) {
    std::vector<std::int32_t> tokens = seq.prompt;
    tokens.insert(tokens.end(), seq.generated.begin(), seq.generated.end());
    const Tensor logits = test::paged_logits(stepper, AttentionMode::dense, tokens);
    const std::span<const float> last(logits.data<float>() + (tokens.size() - 1) * vocab, vocab);
    const std::vector<float> l = seq.penalized(last, p);
    seq.generated.push_back(static_cast<std::int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
  }
  return seq.generated;
}

TEST(EnginePenalties, GreedyWithPenaltiesEqualsAReferenceLoop) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  const Llama model(m.config, m.weights);
  const auto prompt = m.reference["prompts"][2].get<std::vector<std::int32_t>>();
  for (const sample::SamplingParams& p : {penalties(0.f, 0.7f, 1.f), penalties(0.6f, 0.f, 1.f),
                                          penalties(0.f, 0.f, 1.4f), penalties(0.3f, 0.4f, 1.2f),
                                          penalties(-0.5f, -0.3f, 0.8f)}) {
    const std::string label = "presence " + std::to_string(p.presence_penalty) + " frequency " +
                              std::to_string(p.frequency_penalty) + " repetition " +
                              std::to_string(p.repetition_penalty);
    const std::vector<std::int32_t> expected = reference_greedy(model, prompt, 20, p);
    EXPECT_NE(expected, reference_greedy(model, prompt, 20, sample::SamplingParams{})) << label << ": no effect";
    auto runner = test::cpu_runner(m);
    EXPECT_EQ(test::run_engine(*runner, {request(prompt, 20, p)}).at(0).tokens, expected) << label;
  }
}

TEST(EnginePenalties, AFrequencyPenaltyBreaksTheGreedyLoop) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  const auto prompt = m.reference["prompts"][1].get<std::vector<std::int32_t>>();
  auto runner = test::cpu_runner(m);
  const auto plain = test::run_engine(*runner, {request(prompt, 96, {})}).at(0).tokens;
  const auto penalized = test::run_engine(*runner, {request(prompt, 96, penalties(0.f, 2.f, 1.f))}).at(0).tokens;
  EXPECT_GE(sample::test::most_repeated(plain), 12) << "the unpenalized run does not loop: the test shows nothing";
  EXPECT_LE(sample::test::most_repeated(penalized), 3);
}

TEST(EnginePenalties, SampledWithPenaltiesIsTheSameOverlappedOrNotInEveryMode) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama-d64");
  std::mt19937 rng(5);
  const std::vector<std::int32_t> shared = test::random_tokens(rng, 40, 512);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 6; ++i) {
    sample::SamplingParams p = penalties(0.2f * static_cast<float>(i % 3), 0.5f, i % 2 == 0 ? 1.3f : 1.f);
    p.temperature = 0.9f;
    p.top_k = 40;
    p.seed = 10 + static_cast<std::uint64_t>(i);
    GenerationRequest r = request(test::extended(shared, rng, 3 + i), 16, p);
    r.n = 2;
    requests.push_back(r);
  }
  std::vector<std::vector<std::int32_t>> first;
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    for (const bool overlap : {true, false}) {
      engine::EngineOptions options = test::with(mode);
      options.overlap_steps = overlap;
      auto runner = test::cpu_runner(m);
      std::vector<std::vector<std::int32_t>> tokens;
      for (const engine::Completion& c : test::run_engine(*runner, requests, options)) tokens.push_back(c.tokens);
      if (first.empty()) first = tokens;
      EXPECT_EQ(tokens, first) << mode_name(mode) << (overlap ? " overlapped" : " step by step");
    }
  }
}

// The CPU runner's decode steps return each row's top-N (the sampler's, tested in
// test_sampling_penalties.cpp).
TEST(EnginePenalties, TheRunnerReturnsTheTopN) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  auto runner = test::cpu_runner(m);
  sample::test::expect_runner_top_n(*runner, "cpu");
}

bool same(const std::vector<sample::TokenLogprob>& a, const std::vector<sample::TokenLogprob>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const auto& x, const auto& y) {
    return x.token == y.token && x.logprob == y.logprob;
  });
}

// Each token's top-N reaches its TokenEvent and its Completion: N entries, descending, the
// greedy token first with its own logprob; a request without logprobs in the same batch has none.
TEST(EnginePenalties, TopNReachesTokenEventsAndCompletions) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  auto runner = test::cpu_runner(m);
  for (const bool overlap : {true, false}) {
    sample::SamplingParams with_top;
    with_top.logprobs = 5;
    const auto prompt = m.reference["prompts"][1].get<std::vector<std::int32_t>>();
    std::vector<GenerationRequest> requests = {request(prompt, 6, with_top), request(prompt, 6, {})};
    requests[0].n = 2;
    std::vector<engine::TokenEvent> events;
    engine::EngineOptions options;
    options.overlap_steps = overlap;
    options.on_token = [&](const engine::TokenEvent& e) { events.push_back(e); };
    const std::vector<engine::Completion> out = test::run_engine(*runner, requests, options);
    ASSERT_EQ(out.size(), 3u);
    for (int i = 0; i < 2; ++i) {
      const engine::Completion& c = out[static_cast<std::size_t>(i)];
      ASSERT_EQ(c.top_logprobs.size(), c.tokens.size());
      for (std::size_t t = 0; t < c.tokens.size(); ++t) {
        const auto& top = c.top_logprobs[t];
        ASSERT_EQ(top.size(), 5u);
        EXPECT_EQ(top[0].token, c.tokens[t]) << "greedy: the most likely token first";
        EXPECT_FLOAT_EQ(top[0].logprob, c.logprobs[t]);
        for (std::size_t j = 1; j < top.size(); ++j) EXPECT_GE(top[j - 1].logprob, top[j].logprob);
      }
      for (std::size_t t = 0; t < c.tokens.size(); ++t)
        EXPECT_TRUE(same(c.top_logprobs[t], out[0].top_logprobs[t])) << "greedy samples agree";
    }
    EXPECT_TRUE(out[2].top_logprobs.empty());
    std::size_t with_n = 0;
    for (const engine::TokenEvent& e : events) {
      if (e.request == 1) {
        EXPECT_TRUE(e.top_logprobs.empty());
        continue;
      }
      ++with_n;
      const engine::Completion& c = out[static_cast<std::size_t>(e.sample)];
      EXPECT_TRUE(same(e.top_logprobs, c.top_logprobs[static_cast<std::size_t>(e.index)]));
    }
    EXPECT_EQ(with_n, 12u);
  }
}

}  // namespace
}  // namespace hydragen
