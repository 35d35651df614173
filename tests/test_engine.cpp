// The engine on the CPU: greedy equal to transformers in every mode, batched generation equal
// to independent runs, automatic sharing of forests and multi-level trees (counted exactly),
// waiting when memory is short, malformed requests failing alone, stops, seeds, overlapped
// steps, chunked prefill and pinned segment boundaries. The service side (continuous batching,
// preemption, cancellation, metrics): test_engine_service.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <set>

#include "engine_test_util.h"

namespace hydragen {
namespace {

using engine::Completion;
using engine::EngineStats;
using engine::GenerationRequest;

using test::cpu_runner;
using test::with;

std::vector<std::int32_t> reference_prompt(const test::FixtureModel& m, int index) {
  return m.reference["prompts"][index].get<std::vector<std::int32_t>>();
}

TEST(EngineReference, GreedyEqualsTransformersInEveryModeBatchedTogether) {
  for (const char* variant : {"tiny-llama", "tiny-llama-d64", "tiny-qwen2", "tiny-llama31"}) {
    const test::FixtureModel m = test::load_fixture_model(variant);
    std::vector<GenerationRequest> requests;
    std::vector<std::vector<std::int32_t>> expected;
    for (const auto& g : m.reference["greedy"]) {
      requests.push_back(test::greedy_request(reference_prompt(m, g["prompt_index"].get<int>()), 32));
      expected.push_back(g["tokens"].get<std::vector<std::int32_t>>());
    }
    for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
      auto runner = cpu_runner(m);
      const std::vector<Completion> out = test::run_engine(*runner, requests, with(mode));
      ASSERT_EQ(out.size(), expected.size());
      for (std::size_t i = 0; i < out.size(); ++i) {
        EXPECT_EQ(out[i].tokens, expected[i]) << variant << " " << mode_name(mode) << " prompt " << i;
        EXPECT_EQ(out[i].finish_reason, "length");
        EXPECT_EQ(out[i].logprobs.size(), out[i].tokens.size());
      }
    }
  }
}

// 64 sequences under one 150-token prompt prefix, each with its own tail (some tails equal,
// some empty), decoded as one batch == each decoded alone in a fresh engine.
TEST(Engine, SixtyFourSharingAPromptEqualIndependentRuns) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(7);
  const std::vector<std::int32_t> shared = test::random_tokens(rng, 150, 512);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 64; ++i) {
    std::vector<std::int32_t> prompt = test::extended(shared, rng, i % 5 == 0 ? 0 : 1 + i % 23);
    if (i % 7 == 3) prompt = requests[static_cast<std::size_t>(i - 1)].prompt;  // an identical prompt
    requests.push_back(test::greedy_request(prompt, 12));
  }
  std::vector<std::vector<std::int32_t>> alone;
  for (const GenerationRequest& r : requests) {
    auto runner = cpu_runner(m);
    alone.push_back(test::run_engine(*runner, {r}).at(0).tokens);
  }
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    auto runner = cpu_runner(m, 1024);
    const std::vector<Completion> out = test::run_engine(*runner, requests, with(mode));
    for (std::size_t i = 0; i < out.size(); ++i)
      EXPECT_EQ(out[i].tokens, alone[i]) << mode_name(mode) << " sequence " << i;
  }
}

// Trie size of the prompts' first len-1 tokens: what the radix tree must store once.
std::int64_t distinct_prefix_tokens(const std::vector<GenerationRequest>& requests) {
  std::set<std::vector<std::int32_t>> prefixes;
  for (const GenerationRequest& r : requests)
    for (std::size_t len = 1; len < r.prompt.size(); ++len)
      prefixes.insert(std::vector<std::int32_t>(r.prompt.begin(), r.prompt.begin() + static_cast<std::ptrdiff_t>(len)));
  return static_cast<std::int64_t>(prefixes.size());
}

// A forest: two roots; under root A two second-level segments each with several samples and
// tails; an unrelated prompt. Every shared prefix is found without being told, the store
// holds each distinct token once, and the tokens equal independent runs.
TEST(Engine, FindsForestsAndMultiLevelTreesAndStoresEachTokenOnce) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama-d64");
  std::mt19937 rng(11);
  const auto root_a = test::random_tokens(rng, 70, 512), root_b = test::random_tokens(rng, 33, 512);
  const auto level2_x = test::random_tokens(rng, 40, 512), level2_y = test::random_tokens(rng, 17, 512);
  std::vector<GenerationRequest> requests;
  auto add = [&](std::vector<std::vector<std::int32_t>> parts, int n) {
    std::vector<std::int32_t> prompt;
    for (const auto& p : parts) prompt.insert(prompt.end(), p.begin(), p.end());
    GenerationRequest r = test::greedy_request(prompt, 6, n);
    r.sampling.temperature = 0.7f;
    r.sampling.seed = 100 + requests.size();
    requests.push_back(r);
  };
  for (int i = 0; i < 3; ++i) add({root_a, level2_x, test::random_tokens(rng, 5 + i, 512)}, 2);
  for (int i = 0; i < 2; ++i) add({root_a, level2_y, test::random_tokens(rng, 9, 512)}, 3);
  add({root_b, test::random_tokens(rng, 4, 512)}, 2);
  add({test::random_tokens(rng, 12, 512)}, 1);

  std::vector<std::vector<std::int32_t>> alone;
  for (const GenerationRequest& r : requests) {
    auto runner = cpu_runner(m);
    for (const Completion& c : test::run_engine(*runner, {r})) alone.push_back(c.tokens);
  }
  auto runner = cpu_runner(m);
  engine::Engine engine(*runner, with(AttentionMode::hydragen));
  const std::vector<Completion> out = engine.generate(requests);
  ASSERT_EQ(out.size(), alone.size());
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].tokens, alone[i]) << "completion " << i;

  std::int64_t sequences = 0, per_sequence = 0;
  for (const GenerationRequest& r : requests) {
    sequences += r.n;
    per_sequence += r.n * (static_cast<std::int64_t>(r.prompt.size()) - 1 + r.max_new_tokens);
  }
  // At the last step every sequence holds its last prompt token and 5 generated tokens.
  EXPECT_EQ(engine.stats().stored_tokens, distinct_prefix_tokens(requests) + sequences * 6);
  EXPECT_EQ(engine.stats().per_sequence_tokens, per_sequence);
  EXPECT_EQ(engine.stats().decode_steps, 6);
  EXPECT_EQ(engine.stats().prefill_tokens, distinct_prefix_tokens(requests));
}

TEST(Engine, SequencesWaitWhenMemoryIsShortAndNothingIsLost) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(3);
  const std::vector<GenerationRequest> requests = test::under_one_prompt(rng, 40, 10, [](int i) { return 3 + i; }, 20);
  auto big = cpu_runner(m, 512);
  const auto expected = test::run_engine(*big, requests);
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::dense}) {
    // 12 pages of 16 tokens: the shared prompt (3 pages) and a few sequences at a time.
    auto small = cpu_runner(m, 12);
    engine::Engine engine(*small, with(mode));
    const auto out = engine.generate(requests);
    for (std::size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].error, "") << i;
      EXPECT_EQ(out[i].tokens, expected[i].tokens) << mode_name(mode) << " sequence " << i;
    }
    EXPECT_LT(engine.stats().peak_running, 10) << "the small pool should have made sequences wait";
    EXPECT_LE(engine.pool().peak_used_pages(), 12);
    EXPECT_EQ(engine.running(), 0);
  }
}

TEST(Engine, MalformedRequestsFailAloneWithTheirReason) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  const std::vector<std::int32_t> good = reference_prompt(m, 1);
  std::vector<GenerationRequest> requests{test::greedy_request(good, 8)};
  requests.push_back(test::greedy_request({1, 2, 600}, 8));   // token outside the vocabulary
  requests.push_back(test::greedy_request({}, 8));             // empty prompt
  requests.push_back(test::greedy_request(good, 0));           // nothing to generate
  GenerationRequest bad_sampling = test::greedy_request(good, 8);
  bad_sampling.sampling.top_p = 0.f;
  requests.push_back(bad_sampling);
  requests.push_back(test::greedy_request(good, 3000));        // never fits the pool
  requests.push_back(test::greedy_request(good, 8));
  requests.push_back(test::greedy_request(good, 5000));        // past the model's 4096 positions
  auto runner = cpu_runner(m, 64);
  const auto out = test::run_engine(*runner, requests);
  ASSERT_EQ(out.size(), requests.size());
  const auto expected = m.reference["greedy"][0]["tokens"].get<std::vector<std::int32_t>>();
  const std::vector<std::int32_t> first8(expected.begin(), expected.begin() + 8);
  EXPECT_EQ(out[0].tokens, first8);
  EXPECT_EQ(out[6].tokens, first8);
  const char* reasons[] = {"outside the vocabulary", "prompt is empty", "max_new_tokens", "top_p", "KV pages"};
  for (int i = 1; i <= 5; ++i) {
    EXPECT_EQ(out[i].finish_reason, "error") << i;
    EXPECT_NE(out[i].error.find(reasons[i - 1]), std::string::npos) << i << ": " << out[i].error;
    EXPECT_TRUE(out[i].tokens.empty());
  }
  EXPECT_EQ(out[7].finish_reason, "error");
  EXPECT_NE(out[7].error.find("context of 4096 positions"), std::string::npos) << out[7].error;
}

// A request whose pinned segments need more pages than the pool has, though its token count
// fits (each pinned segment starts on fresh pages: 4 one-token segments take a page each, the
// other 145 tokens 10, its own tokens 1: 15 pages of 12). The check at submit counts tokens, so
// it is admitted to wait; once nothing else holds pages it fails alone with its reason, and the
// request queued behind it still runs, with the tokens it gets alone.
TEST(Engine, RequestThatCanNeverBeAdmittedFailsAloneAndTheQueueMovesOn) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(5);
  const auto good = test::random_tokens(rng, 30, 512);
  GenerationRequest pinned = test::greedy_request(test::random_tokens(rng, 150, 512), 8);
  pinned.segment_ends = {1, 2, 3, 4};
  const std::vector<GenerationRequest> requests{test::greedy_request(good, 8), pinned, test::greedy_request(good, 8)};
  auto big = cpu_runner(m);
  const auto alone = test::run_engine(*big, {requests[0]});
  auto small = cpu_runner(m, 12);
  const auto out = test::run_engine(*small, requests);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[1].finish_reason, "error");
  EXPECT_TRUE(out[1].kv_pool_full);
  EXPECT_NE(out[1].error.find("KV pool"), std::string::npos) << out[1].error;
  EXPECT_TRUE(out[1].tokens.empty());
  for (int i : {0, 2}) {
    EXPECT_EQ(out[i].error, "") << i;
    EXPECT_FALSE(out[i].kv_pool_full) << i;
    EXPECT_EQ(out[i].tokens, alone[0].tokens) << i;
  }
}

TEST(Engine, StopsAtStopTokensAndStringsAndLength) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  const auto expected = m.reference["greedy"][0]["tokens"].get<std::vector<std::int32_t>>();
  GenerationRequest r = test::greedy_request(reference_prompt(m, 1), 32);
  r.stop_token_ids = {expected[4]};
  GenerationRequest by_string = test::greedy_request(reference_prompt(m, 1), 32);
  by_string.stop_strings = {"<" + std::to_string(expected[2]) + ">"};
  engine::EngineOptions options;
  options.detokenize = [](std::span<const std::int32_t> ids) {
    std::string text;
    for (std::int32_t id : ids) text += "<" + std::to_string(id) + ">";
    return text;
  };
  auto runner = cpu_runner(m);
  const auto out = test::run_engine(*runner, {r, by_string, test::greedy_request(reference_prompt(m, 1), 3)}, options);
  EXPECT_EQ(out[0].finish_reason, "stop");
  // The first occurrence of the stop token ends it (the token is kept, as EOS is).
  const auto first = std::find(expected.begin(), expected.end(), expected[4]) - expected.begin();
  EXPECT_EQ(out[0].tokens, std::vector<std::int32_t>(expected.begin(), expected.begin() + first + 1));
  EXPECT_EQ(out[1].finish_reason, "stop");
  EXPECT_EQ(out[1].tokens.size(), static_cast<std::size_t>(std::find(expected.begin(), expected.end(), expected[2]) -
                                                            expected.begin() + 1));
  EXPECT_EQ(out[2].finish_reason, "length");
  EXPECT_EQ(out[2].tokens.size(), 3u);
}

// 12 requests under one 90-token prompt, 19 sequences: lengths 6..22, every third sampled,
// every fourth stopped by any even token (most likely within a few steps, while others run on).
std::vector<GenerationRequest> stopping_sampled_requests(std::uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<std::int32_t> shared = test::random_tokens(rng, 90, 512);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 12; ++i) {
    GenerationRequest r = test::greedy_request(test::extended(shared, rng, 1 + i % 9), 6 + (i * 5) % 17, 1 + i % 2);
    if (i % 3 == 1) r.sampling = {0.8f, 30, 0.9f, 0.0f, static_cast<std::uint64_t>(100 + i)};
    if (i % 4 == 2)
      for (std::int32_t id = 0; id < 512; id += 2) r.stop_token_ids.push_back(id);
    requests.push_back(std::move(r));
  }
  return requests;
}

// The launch/collect contract of model_runner.h, watched on the CPU runner: at most two steps
// launched and not collected, fed rows only with the step before in flight, each fed row one
// position past the row it is fed from (the same sequence, one token on).
class OverlapChecker final : public test::ForwardingRunner {
 public:
  using ForwardingRunner::ForwardingRunner;
  void launch(const engine::StepWork& step) override {
    EXPECT_LT(in_flight, 2);
    if (in_flight > 0) ++launched_in_flight;
    if (!step.fed_from.empty()) {
      ++fed;
      EXPECT_GE(in_flight, 1) << "tokens from a step not in flight";
      for (std::size_t r = 0; r < step.fed_from.size(); ++r) {
        const auto from = static_cast<std::size_t>(step.fed_from[r]);
        reordered += from != r;
        EXPECT_LT(from, last_positions_.size()) << "row " << r;
        if (from < last_positions_.size()) EXPECT_EQ(step.rows.positions[r], last_positions_[from] + 1) << "row " << r;
      }
    }
    last_positions_.assign(step.rows.positions.begin(), step.rows.positions.begin() + step.sampling.size());
    max_in_flight = std::max(max_in_flight, ++in_flight);
    inner_->launch(step);
  }
  engine::SampledTokens collect() override {
    EXPECT_GT(in_flight, 0);
    --in_flight;
    return inner_->collect();
  }
  int in_flight = 0, max_in_flight = 0, fed = 0, launched_in_flight = 0, reordered = 0;

 private:
  std::vector<std::int32_t> last_positions_;  // of the sampled rows of the step launched last
};

// EngineOptions::overlap_steps: each step is launched before the last one is collected.
// Sequences that stop at stop tokens (their row of the step in flight is dropped), finish by
// length, and join as others finish (max_running), greedy and sampled: the same tokens,
// logprobs, finish reasons and on_token calls as the step-by-step engine, and every kind of
// step occurs (fed rows in order, and reordered where a sequence left the middle of the batch).
TEST(Engine, OverlappedStepsGiveTheSameTokens) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  const std::vector<GenerationRequest> requests = stopping_sampled_requests(11);
  for (AttentionMode attention : {AttentionMode::hydragen, AttentionMode::paged}) {
    SCOPED_TRACE(mode_name(attention));
    auto run = [&](engine::ModelRunner& runner, bool overlap, EngineStats& stats, test::StreamedTokens& streamed) {
      engine::EngineOptions options = with(attention);
      options.overlap_steps = overlap;
      options.max_running = 7;  // the rest wait and join as others finish
      options.on_token = std::ref(streamed);
      engine::Engine engine(runner, options);
      std::vector<Completion> out = engine.generate(requests);
      stats = engine.stats();
      return out;
    };
    OverlapChecker checked(cpu_runner(m, 1024));
    auto plain = cpu_runner(m, 1024);
    EngineStats overlapped, in_place;
    test::StreamedTokens streamed_a, streamed_b;
    const std::vector<Completion> a = run(checked, true, overlapped, streamed_a);
    const std::vector<Completion> b = run(*plain, false, in_place, streamed_b);
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].tokens, b[i].tokens) << "completion " << i;
      EXPECT_EQ(a[i].finish_reason, b[i].finish_reason) << "completion " << i;
      // To rounding: a step holding a dropped row has one row more, so its products sum in
      // another blocking.
      ASSERT_EQ(a[i].logprobs.size(), b[i].logprobs.size()) << "completion " << i;
      for (std::size_t t = 0; t < a[i].logprobs.size(); ++t)
        EXPECT_NEAR(a[i].logprobs[t], b[i].logprobs[t], 1e-4) << "completion " << i << " token " << t;
    }
    EXPECT_EQ(streamed_a.tokens, streamed_b.tokens);
    EXPECT_EQ(checked.in_flight, 0);
    EXPECT_EQ(checked.max_in_flight, 2);
    EXPECT_EQ(overlapped.overlapped_steps, checked.launched_in_flight);
    EXPECT_GT(checked.fed, 0);
    EXPECT_GT(checked.reordered, 0);  // a sequence left the middle of the batch in flight
    EXPECT_GT(overlapped.dropped_rows, 0);  // a stop token ended a sequence the next step held
    EXPECT_EQ(overlapped.decode_tokens, in_place.decode_tokens);
    EXPECT_EQ(in_place.overlapped_steps + in_place.dropped_rows, 0);
  }
}

// Calls observe() with the rows and plan of every step with decode rows, then runs it.
class DecodeObserver : public test::ForwardingRunner {
 public:
  using ForwardingRunner::ForwardingRunner;
  void launch(const engine::StepWork& step) override {
    if (step.sampling.size() > 0) observe(step.rows, step.plan ? &*step.plan : nullptr);
    inner_->launch(step);
  }

 protected:
  virtual void observe(const StepRows& rows, const plan::AttentionPlan* plan) = 0;
};

// Overlapped steps run the same device work as step-by-step ones where the batch holds: a
// runner that records every decode step's rows and plan sees the same sequence in both modes
// (eight sequences of one length under a shared prompt, no stops).
class StepRecorder final : public DecodeObserver {
 public:
  using DecodeObserver::DecodeObserver;
  std::vector<std::string> steps;  // positions, slots and the plan's arrays, as bytes

 private:
  void observe(const StepRows& rows, const plan::AttentionPlan* plan) override {
    std::string bytes;
    auto put = [&](const auto& v) {
      bytes.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
      bytes += '|';
    };
    put(rows.positions), put(rows.slots);
    if (plan != nullptr) {
      put(plan->pages), put(plan->pieces), put(plan->rows), put(plan->shared_items), put(plan->suffix_items);
      put(plan->groups);
    }
    steps.push_back(std::move(bytes));
  }
};

TEST(Engine, OverlappedStepsRunTheSamePlans) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(13);
  const std::vector<std::int32_t> shared = test::random_tokens(rng, 80, 512);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(test::greedy_request(test::extended(shared, rng, 3 + i), 12, 2));
  for (AttentionMode attention : {AttentionMode::hydragen, AttentionMode::paged}) {
    StepRecorder overlapped(cpu_runner(m, 1024)), in_place(cpu_runner(m, 1024));
    engine::EngineOptions options = with(attention);
    test::run_engine(overlapped, requests, options);
    options.overlap_steps = false;
    test::run_engine(in_place, requests, options);
    EXPECT_EQ(overlapped.steps.size(), 12u) << mode_name(attention);
    EXPECT_TRUE(overlapped.steps == in_place.steps) << mode_name(attention);
  }
}

// Steps in flight are collected before anything else touches the batch or the runner: a
// skip of suffix tokens, turning overlap off, and the engine's end. The tokens collected on the
// way are kept.
TEST(Engine, StepsInFlightAreCollectedFirst) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  OverlapChecker runner(cpu_runner(m, 1024));
  std::int64_t tokens = 0;
  {
    engine::EngineOptions options;
    options.on_token = [&](const engine::TokenEvent& e) { tokens += e.sample == 0; };
    engine::Engine engine(runner, options);
    engine.submit(test::greedy_request(reference_prompt(m, 1), 20, 3));
    EXPECT_EQ(engine.admit_and_prefill(), 3);
    EXPECT_EQ(runner.in_flight, 0);
    engine.step();  // launches the first decode step, collects nothing
    EXPECT_EQ(runner.in_flight, 1);
    EXPECT_EQ(tokens, 0);
    engine.step();  // launches the second, collects the first
    EXPECT_EQ(runner.in_flight, 1);
    EXPECT_EQ(tokens, 1);
    engine.skip_suffix_tokens(2);
    EXPECT_EQ(runner.in_flight, 0);
    EXPECT_EQ(tokens, 2);  // the second collected (and two skipped, which on_token does not see)
    engine.step();
    EXPECT_EQ(runner.in_flight, 1);
    engine.set_overlap_steps(false);
    EXPECT_EQ(runner.in_flight, 0);
    engine.step();  // step by step now
    EXPECT_EQ(runner.in_flight, 0);
    engine.set_overlap_steps(true);
    engine.step();
    EXPECT_EQ(runner.in_flight, 1);
  }  // the engine's end
  EXPECT_EQ(runner.in_flight, 0);
}

TEST(Engine, SameSeedSameTokensAndSampleIUsesSeedPlusI) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  GenerationRequest r = test::greedy_request(reference_prompt(m, 2), 16, 4);
  r.sampling = {0.9f, 40, 0.95f, 0.01f, 10};
  auto runner = cpu_runner(m);
  const auto a = test::run_engine(*runner, {r});
  const auto b = test::run_engine(*runner, {r});
  GenerationRequest one = r;
  one.n = 1;
  one.sampling.seed = 12;
  const auto c = test::run_engine(*runner, {one});
  std::set<std::vector<std::int32_t>> distinct;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
    distinct.insert(a[i].tokens);
  }
  EXPECT_EQ(a[2].tokens, c[0].tokens);
  EXPECT_GT(distinct.size(), 1u) << "four seeds gave identical samples";
}

TEST(Engine, ChunkedPrefillPinnedSegmentsAndPageSizesGiveTheSameTokens) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama-d64");
  std::mt19937 rng(5);
  std::vector<GenerationRequest> requests;
  const auto system = test::random_tokens(rng, 45, 512);
  for (int i = 0; i < 5; ++i) {
    auto prompt = test::extended(system, rng, 20 + 7 * i);
    requests.push_back(test::greedy_request(prompt, 10, 1 + i % 2));
  }
  auto runner = cpu_runner(m);
  const auto expected = test::run_engine(*runner, requests);
  engine::EngineOptions chunked;
  chunked.max_step_tokens = 7;  // decode rows included: at most 7 sequences run
  EXPECT_EQ(test::run_engine(*runner, requests, chunked).at(3).tokens, expected[3].tokens);
  auto pinned = requests;
  for (auto& r : pinned) r.segment_ends = {10, 45};
  const auto out_pinned = test::run_engine(*runner, pinned);
  for (int page_size : {16, 64}) {
    auto other = cpu_runner(m, 128, page_size);
    const auto out = test::run_engine(*other, requests, chunked);
    for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].tokens, expected[i].tokens) << page_size << " " << i;
  }
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(out_pinned[i].tokens, expected[i].tokens) << i;
}

// The context positions where the decode plans' pieces end, over every decode step.
class PieceEndRecorder final : public DecodeObserver {
 public:
  using DecodeObserver::DecodeObserver;
  std::set<std::int32_t> ends;

 private:
  void observe(const StepRows&, const plan::AttentionPlan* plan) override {
    if (plan != nullptr)
      for (const plan::PlanPiece& piece : plan->pieces) ends.insert(piece.position + piece.tokens);
  }
};

// A request's explicit sharing spec (GenerationRequest::segment_ends: a JSONL line's
// "segments" / "segment_ids") pins segment boundaries inside a shared prompt: the decode plans'
// pieces end there, where without the pins they run on (the 45-token system prompt is one
// piece), and the tokens are the same either way.
TEST(Engine, PinnedSegmentEndsAreBoundariesOfTheDecodePlans) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(17);
  const auto system = test::random_tokens(rng, 45, 512);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 3; ++i) requests.push_back(test::greedy_request(test::extended(system, rng, 5 + i), 4, 2));
  auto pinned = requests;
  for (auto& r : pinned) r.segment_ends = {10, 23};
  for (AttentionMode attention : {AttentionMode::hydragen, AttentionMode::paged}) {
    PieceEndRecorder plain(cpu_runner(m)), with_pins(cpu_runner(m));
    const auto a = test::run_engine(plain, requests, with(attention));
    const auto b = test::run_engine(with_pins, pinned, with(attention));
    const char* name = mode_name(attention);
    EXPECT_TRUE(plain.ends.count(45)) << name;
    EXPECT_FALSE(plain.ends.count(10) || plain.ends.count(23)) << name;
    EXPECT_TRUE(with_pins.ends.count(10) && with_pins.ends.count(23) && with_pins.ends.count(45)) << name;
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << name << " " << i;
  }
}

TEST(Engine, NoneModeKeepsTheProjectionsAndRuns) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  auto runner = cpu_runner(m);
  const auto out = test::run_engine(*runner, {test::greedy_request(reference_prompt(m, 1), 8, 3)}, with(AttentionMode::none));
  ASSERT_EQ(out.size(), 3u);
  for (const Completion& c : out) {
    EXPECT_EQ(c.tokens.size(), 8u);
    EXPECT_EQ(c.tokens, out[0].tokens);
  }
  const auto expected = m.reference["greedy"][0]["tokens"].get<std::vector<std::int32_t>>();
  EXPECT_NE(out[0].tokens, std::vector<std::int32_t>(expected.begin(), expected.begin() + 8))
      << "without attention the tokens should differ from the model's";
}

// `none` skips only what mixes tokens: a row's output is its own projections and MLP, so two
// prompts of one length that share only their last token continue the same way, and with
// attention they do not.
TEST(Engine, NoneModeIgnoresEveryTokenButARowsOwn) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(23);
  auto a = test::random_tokens(rng, 20, 512), b = test::random_tokens(rng, 20, 512);
  a.push_back(77), b.push_back(77);
  for (AttentionMode attention : {AttentionMode::none, AttentionMode::hydragen}) {
    auto runner = cpu_runner(m);
    const auto out = test::run_engine(*runner, {test::greedy_request(a, 8), test::greedy_request(b, 8)}, with(attention));
    ASSERT_EQ(out.size(), 2u);
    if (attention == AttentionMode::none) EXPECT_EQ(out[0].tokens, out[1].tokens);
    else EXPECT_NE(out[0].tokens, out[1].tokens) << "the prompts' other tokens should matter with attention";
  }
}

// The paper's one-level baseline: sharing limited to the root prefix (the problem is copied
// into each sample's own pages) gives the same tokens as two-level sharing, and stores more.
TEST(Engine, SharingLimitedToARootPrefixGivesTheSameTokensAndStoresMore) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama-d64");
  std::mt19937 rng(17);
  const auto fewshot = test::random_tokens(rng, 60, 512);
  std::vector<engine::GenerationRequest> requests;
  for (int p = 0; p < 3; ++p) {
    auto prompt = test::extended(fewshot, rng, 25 + p);
    engine::GenerationRequest r = test::greedy_request(prompt, 7, 4);
    r.sampling = {0.8f, 0, 1.f, 0.f, 1000u + p};
    requests.push_back(r);
  }
  engine::RunnerOptions options;
  options.kv_pages = 256;
  options.page_size = 16;
  auto runner = engine::make_cpu_runner(m.config, m.weights, options);
  engine::Engine two_level(*runner, {});
  const auto expected = two_level.generate(requests);
  for (auto& r : requests) r.max_shared_tokens = 60;
  engine::Engine one_level(*runner, {});
  const auto out = one_level.generate(requests);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].tokens, expected[i].tokens) << i;
  // Each of the 12 samples stores its problem itself instead of once per problem: the tree
  // part of a problem is its 25..27 tokens less the prompt's last one (24 + 25 + 26 = 3 x 25).
  EXPECT_EQ(one_level.stats().stored_tokens - two_level.stats().stored_tokens, (4 - 1) * 3 * 25);
  EXPECT_EQ(one_level.stats().per_sequence_tokens, two_level.stats().per_sequence_tokens);
}


// The radix tree outlives a generate() call: a later batch that starts with a cached prompt
// prefills only its new tokens, and gets the same tokens as a fresh engine.
TEST(Engine, CachedPrefixesAreReusedAcrossCalls) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama-d64");
  std::mt19937 rng(23);
  const auto system = test::random_tokens(rng, 90, 512);
  auto with_tail = [&](std::int64_t tail) {
    auto prompt = test::extended(system, rng, tail);
    return test::greedy_request(prompt, 5, 2);
  };
  const std::vector<engine::GenerationRequest> first{with_tail(10)}, second{with_tail(7), with_tail(12)};
  engine::RunnerOptions options;
  options.kv_pages = 128;
  options.page_size = 16;
  auto runner = engine::make_cpu_runner(m.config, m.weights, options);
  engine::Engine engine(*runner, {});
  engine.generate(first);
  const std::int64_t after_first = engine.stats().prefill_tokens;
  EXPECT_EQ(after_first, 90 + 10 - 1);
  const auto out = engine.generate(second);
  // Only the two new tails (less each prompt's last token) are prefilled.
  EXPECT_EQ(engine.stats().prefill_tokens - after_first, (7 - 1) + (12 - 1));
  auto fresh_runner = engine::make_cpu_runner(m.config, m.weights, options);
  const auto fresh = test::run_engine(*fresh_runner, second);
  ASSERT_EQ(out.size(), fresh.size());
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].tokens, fresh[i].tokens) << i;
}

}  // namespace
}  // namespace hydragen
