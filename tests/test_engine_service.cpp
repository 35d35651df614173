// The engine as a service, on the CPU: requests submitted during a run join at a step and leave
// when done (first come, first served); pages on demand; preemption under a tiny pool (every
// request gets exactly the tokens it gets alone); a long prompt prefilled in chunks beside the
// decode rows (mixed steps); the prefix cache across requests; cancellation; metrics.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine_test_util.h"
#include "hydragen/error.h"

namespace hydragen {
namespace {

using engine::Completion;
using engine::GenerationRequest;
using engine::RequestId;
using test::cpu_runner;
using Key = std::pair<RequestId, int>;  // (request, sample)

constexpr int kMostSteps = 5000;  // every run below ends well before

// Each request alone in a fresh engine with a large pool: the tokens every other run must give.
std::vector<Completion> alone(const test::FixtureModel& m, const std::vector<GenerationRequest>& requests,
                              AttentionMode attention = AttentionMode::hydragen) {
  std::vector<Completion> out;
  for (const GenerationRequest& r : requests) {
    auto runner = cpu_runner(m, 1024);
    for (Completion& c : test::run_engine(*runner, {r}, test::with(attention))) out.push_back(std::move(c));
  }
  return out;
}

void expect_same_completions(const std::vector<Completion>& out, const std::vector<Completion>& expected,
                             const std::string& what) {
  ASSERT_EQ(out.size(), expected.size()) << what;
  for (std::size_t i = 0; i < out.size(); ++i) {
    EXPECT_EQ(out[i].error, "") << what << " completion " << i;
    EXPECT_EQ(out[i].tokens, expected[i].tokens) << what << " completion " << i;
    EXPECT_EQ(out[i].finish_reason, expected[i].finish_reason) << what << " completion " << i;
    ASSERT_EQ(out[i].logprobs.size(), expected[i].logprobs.size()) << what << " completion " << i;
    for (std::size_t t = 0; t < out[i].logprobs.size(); ++t)
      EXPECT_NEAR(out[i].logprobs[t], expected[i].logprobs[t], 1e-4) << what << " completion " << i << " token " << t;
  }
}

// Which requests got a token at each step() call of a run driven by the test.
struct TokenLog {
  int step = 0;
  std::map<RequestId, std::vector<int>> steps_of;  // the steps at which each request got a token
  std::map<RequestId, std::vector<std::int32_t>> tokens;
  void operator()(const engine::TokenEvent& e) {
    steps_of[e.request].push_back(step);
    tokens[e.request].push_back(e.token);
  }
};

// Requests join a running batch at a step boundary and leave when done: B, submitted while A
// runs, gets its first token while A still decodes and finishes first; A gets a token at every
// step from its first to its last. Both get the tokens they get alone. With one sequence at a
// time they run first come, first served.
TEST(EngineService, RequestsSubmittedDuringARunJoinAtAStepAndLeaveWhenDone) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(31);
  const GenerationRequest a = test::greedy_request(test::random_tokens(rng, 30, 512), 24);
  const GenerationRequest b = test::greedy_request(test::random_tokens(rng, 20, 512), 8);
  const std::vector<Completion> expected = alone(m, {a, b});
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlapped" : "step by step");
    auto runner = cpu_runner(m);
    TokenLog log;
    engine::EngineOptions options;
    options.overlap_steps = overlap;
    options.on_token = std::ref(log);
    engine::Engine engine(*runner, options);
    const RequestId ida = engine.submit(a);
    for (; log.step < 6; ++log.step) engine.step();
    EXPECT_GE(log.tokens[ida].size(), 3u);
    const RequestId idb = engine.submit(b);
    for (; log.step < kMostSteps && engine.step(); ++log.step) {
    }
    EXPECT_EQ(log.tokens[ida], expected[0].tokens);
    EXPECT_EQ(log.tokens[idb], expected[1].tokens);
    const std::vector<int>& steps_a = log.steps_of[ida];
    for (std::size_t i = 1; i < steps_a.size(); ++i) EXPECT_EQ(steps_a[i], steps_a[i - 1] + 1) << "A's token " << i;
    EXPECT_LT(log.steps_of[idb].front(), steps_a.back()) << "B joined the running batch";
    EXPECT_LT(log.steps_of[idb].back(), steps_a.back()) << "B left it before A";
    EXPECT_EQ(engine.running(), 0);
  }
  // One sequence at a time: in submission order.
  auto runner = cpu_runner(m);
  TokenLog log;
  engine::EngineOptions options;
  options.max_running = 1;
  options.on_token = std::ref(log);
  engine::Engine engine(*runner, options);
  const RequestId first = engine.submit(b), second = engine.submit(a);
  for (; log.step < kMostSteps && engine.step(); ++log.step) {
  }
  EXPECT_LT(log.steps_of[first].back(), log.steps_of[second].front());
  EXPECT_EQ(log.tokens[second], expected[0].tokens);
}

// A lone request in every mode, overlapped and step by step (dense and one-level sharing copy
// its prompt between two steps, with nothing else to run): the model's greedy tokens.
TEST(EngineService, ALoneRequestRunsInEveryModeAndSharingDepth) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  const auto& greedy = m.reference["greedy"][0];
  GenerationRequest r = test::greedy_request(
      m.reference["prompts"][greedy["prompt_index"].get<int>()].get<std::vector<std::int32_t>>(), 12);
  const auto all = greedy["tokens"].get<std::vector<std::int32_t>>();
  const std::vector<std::int32_t> expected(all.begin(), all.begin() + 12);
  for (AttentionMode attention : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense})
    for (std::int64_t max_shared : {-1, 3})
      for (bool overlap : {true, false}) {
        r.max_shared_tokens = max_shared;
        engine::EngineOptions options = test::with(attention);
        options.overlap_steps = overlap;
        auto runner = cpu_runner(m);
        EXPECT_EQ(test::run_engine(*runner, {r}, options).at(0).tokens, expected)
            << mode_name(attention) << " max_shared " << max_shared << " overlap " << overlap;
      }
}

// Pages on demand: eight sequences that stop early (any even token stops them) with
// max_new_tokens 400 each would reserve 8 x 25 pages; a pool of 40 runs all of them at once.
TEST(EngineService, PagesOnDemandRunEverySequenceInAPoolSmallerThanTheirMaxNewTokens) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(37);
  std::vector<GenerationRequest> requests = test::under_one_prompt(rng, 40, 8, [](int i) { return 1 + i; }, 400);
  for (GenerationRequest& r : requests)
    for (std::int32_t id = 0; id < 512; id += 2) r.stop_token_ids.push_back(id);
  const std::vector<Completion> expected = alone(m, requests);
  auto runner = cpu_runner(m, 40);
  engine::Engine engine(*runner, {});
  expect_same_completions(engine.generate(requests), expected, "pool of 40");
  EXPECT_EQ(engine.stats().peak_running, 8);
  EXPECT_LE(engine.pool().peak_used_pages(), 40);
}

// 5 requests under a 40-token prompt, 7 sequences (greedy, seeded sampling, n = 2), 40 tokens
// each, in a pool that cannot hold them at their longest: the newest are preempted and resumed
// (their tokens so far recomputed), and every completion has the tokens and logprobs it has alone.
TEST(EngineService, PreemptedSequencesResumeWithTheTokensTheyGetAlone) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(41);
  std::vector<GenerationRequest> requests = test::under_one_prompt(rng, 40, 5, [](int i) { return 2 + 3 * i; }, 40);
  for (int i = 0; i < 5; ++i) {
    GenerationRequest& r = requests[static_cast<std::size_t>(i)];
    r.n = i % 3 == 1 ? 2 : 1;
    if (i % 2 == 1) r.sampling = {0.8f, 40, 0.95f, 0.f, static_cast<std::uint64_t>(500 + i)};
  }
  for (AttentionMode attention : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    for (bool overlap : {true, false}) {
      const std::string what = concat(mode_name(attention), overlap ? " overlapped" : " step by step");
      // Tree: 3 pages + 5 tails; own pages: 3 per sequence at 40 tokens (dense: 6, the prompt too).
      const std::int64_t pages = attention == AttentionMode::dense ? 24 : 16;
      auto runner = cpu_runner(m, pages);
      engine::EngineOptions options = test::with(attention);
      options.overlap_steps = overlap;
      engine::Engine engine(*runner, options);
      expect_same_completions(engine.generate(requests), alone(m, requests, attention), what);
      const engine::EngineMetrics metrics = engine.metrics();
      EXPECT_GT(metrics.preemptions, 0) << what;
      EXPECT_EQ(metrics.kv_pages_used, metrics.kv_pages_cached) << what << ": only the cache holds pages";
      EXPECT_LE(engine.pool().peak_used_pages(), pages) << what;
    }
  }
}

// Chunked prefill beside decode: four streams decode while a 400-token prompt arrives in
// chunks of what the 32-row step budget leaves; each stream gets a token at every step, the
// long prompt takes many steps (mixed steps: its chunk and their decode rows in one forward),
// and every request gets the tokens and logprobs it gets alone.
TEST(EngineService, ALongPromptArrivesInChunksWhileTheOthersKeepDecoding) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama-d64");
  std::mt19937 rng(43);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(test::greedy_request(test::random_tokens(rng, 20 + i, 512), 50));
  GenerationRequest long_prompt = test::greedy_request(test::random_tokens(rng, 400, 512), 6);
  long_prompt.sampling = {0.7f, 0, 1.f, 0.f, 9};
  std::vector<GenerationRequest> all = requests;
  all.push_back(long_prompt);
  const std::vector<Completion> expected = alone(m, all);
  for (bool overlap : {true, false}) {
    SCOPED_TRACE(overlap ? "overlapped" : "step by step");
    auto runner = cpu_runner(m);
    TokenLog log;
    engine::EngineOptions options;
    options.max_step_tokens = 32;
    options.overlap_steps = overlap;
    options.on_token = std::ref(log);
    engine::Engine engine(*runner, options);
    std::vector<RequestId> ids;
    for (const GenerationRequest& r : requests) ids.push_back(engine.submit(r));
    for (; log.step < 5; ++log.step) engine.step();
    const int arrives = log.step;
    ids.push_back(engine.submit(long_prompt));
    for (; log.step < kMostSteps && engine.step(); ++log.step) {
    }
    for (std::size_t i = 0; i < ids.size(); ++i)
      EXPECT_EQ(log.tokens[ids[i]], expected[i].tokens) << "request " << i;
    const int first_long = log.steps_of[ids.back()].front();
    EXPECT_GE(first_long - arrives, 400 / 28) << "the long prompt should take a chunk per step";
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const std::vector<int>& steps = log.steps_of[ids[i]];
      for (int s = arrives; s <= first_long; ++s)
        EXPECT_TRUE(std::count(steps.begin(), steps.end(), s) == 1) << "request " << i << " at step " << s;
    }
    EXPECT_GE(engine.stats().mixed_steps, 400 / 28);
  }
}

// Runs `first`, then submits `later` after one more step and runs to the end; completions in
// (request, sample) order.
std::vector<Completion> run_with_arrival(engine::ModelRunner& runner, engine::EngineOptions options,
                                         const GenerationRequest& first, const GenerationRequest& later,
                                         engine::EngineStats& stats) {
  std::map<Key, Completion> done;
  options.on_finish = [&](const Completion& c) { done[{c.request, c.sample}] = c; };
  engine::Engine engine(runner, options);
  engine.submit(first);
  engine.admit_and_prefill();
  engine.step();
  engine.submit(later);
  for (int s = 0; s < kMostSteps && engine.step(); ++s) {
  }
  stats = engine.stats();
  std::vector<Completion> out;
  for (auto& [key, c] : done) out.push_back(std::move(c));
  return out;
}

// A mixed step computes what a prefill step and a decode step compute apart: with a budget of
// 40 rows the 90-token prompt is prefilled in chunks beside the three decode rows; with 3 it
// waits until they finish and is prefilled alone. The decode rows' tokens and logprobs are the
// same, and so are the tokens that the chunked prompt's K/V gives.
TEST(EngineService, AMixedStepEqualsASeparatePrefillAndDecode) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(47);
  const GenerationRequest decoding = test::greedy_request(test::random_tokens(rng, 25, 512), 12, 3);
  GenerationRequest arriving = test::greedy_request(test::random_tokens(rng, 90, 512), 10);
  arriving.sampling = {0.9f, 0, 1.f, 0.f, 3};
  engine::EngineOptions options;
  options.overlap_steps = false;
  engine::EngineStats mixed, separate;
  options.max_step_tokens = 40;
  auto a_runner = cpu_runner(m), b_runner = cpu_runner(m);
  const std::vector<Completion> a = run_with_arrival(*a_runner, options, decoding, arriving, mixed);
  options.max_step_tokens = 3;
  const std::vector<Completion> b = run_with_arrival(*b_runner, options, decoding, arriving, separate);
  expect_same_completions(a, b, "mixed vs separate");
  EXPECT_GE(mixed.mixed_steps, 3);
  EXPECT_EQ(separate.mixed_steps, 0);
}

// The prefix cache lives as long as the engine: a second request with the same system prompt
// prefills only its own part (the metrics count the hit), two concurrent ones prefill it once,
// and the tokens equal a fresh engine's.
TEST(EngineService, ASystemPromptIsPrefilledOnceAcrossRequests) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama-d64");
  std::mt19937 rng(53);
  const auto system = test::random_tokens(rng, 64, 512);
  const GenerationRequest first = test::greedy_request(test::extended(system, rng, 10), 6);
  const GenerationRequest second = test::greedy_request(test::extended(system, rng, 7), 6, 2);
  auto runner = cpu_runner(m);
  engine::Engine engine(*runner, {});
  engine.generate(std::vector{first});
  EXPECT_EQ(engine.stats().prefill_tokens, 64 + 10 - 1);
  EXPECT_EQ(engine.metrics().prefix_cache_hit_tokens, 0);
  const std::vector<Completion> out = engine.generate(std::vector{second});
  EXPECT_EQ(engine.stats().prefill_tokens - (64 + 10 - 1), 7 - 1) << "only its own part";
  const engine::EngineMetrics metrics = engine.metrics();
  // Each of the second request's samples found the system prompt with its K/V.
  EXPECT_EQ(metrics.prefix_cache_hit_tokens, 2 * 64);
  EXPECT_EQ(metrics.prefix_cache_query_tokens, (64 + 10 - 1) + 2 * (64 + 7 - 1));
  EXPECT_EQ(metrics.kv_pages_used, metrics.kv_pages_cached);
  EXPECT_GT(metrics.kv_pages_cached, 0);
  expect_same_completions(out, alone(m, {second}), "cached");

  auto fresh = cpu_runner(m);
  engine::Engine together(*fresh, {});
  together.generate(std::vector{first, second});
  EXPECT_EQ(together.stats().prefill_tokens, 64 + (10 - 1) + (7 - 1)) << "the system prompt once";
}

// Cancellation: a waiting request never starts; running ones (one with a row in flight)
// finish "cancelled" with the tokens they had, a prefix of what they get alone, and their
// pages are back by the end of the next step; the request left running is not disturbed.
TEST(EngineService, CancelledRequestsFinishAndGiveTheirPagesBack) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(59);
  const std::vector<GenerationRequest> requests{test::greedy_request(test::random_tokens(rng, 30, 512), 40),
                                                test::greedy_request(test::random_tokens(rng, 35, 512), 30, 2),
                                                test::greedy_request(test::random_tokens(rng, 20, 512), 20)};
  const std::vector<Completion> expected = alone(m, requests);
  auto runner = cpu_runner(m);
  std::map<Key, Completion> done;
  engine::EngineOptions options;
  options.max_running = 3;  // the third request waits
  options.on_finish = [&](const Completion& c) {
    EXPECT_TRUE(done.emplace(Key(c.request, c.sample), c).second) << "on_finish twice";
  };
  engine::Engine engine(*runner, options);
  std::vector<RequestId> ids;
  for (const GenerationRequest& r : requests) ids.push_back(engine.submit(r));
  for (int s = 0; s < 6; ++s) engine.step();
  EXPECT_EQ(engine.waiting(), 1);
  engine.cancel(ids[2]);
  engine.cancel(ids[1]);  // both samples have a row in flight
  engine.step();
  EXPECT_EQ(engine.waiting(), 0);
  EXPECT_EQ(engine.running(), 1);
  ASSERT_TRUE(done.count(Key(ids[2], 0)));
  EXPECT_EQ(done[Key(ids[2], 0)].finish_reason, "cancelled");
  EXPECT_TRUE(done[Key(ids[2], 0)].tokens.empty());
  for (int sample : {0, 1}) {
    ASSERT_TRUE(done.count(Key(ids[1], sample)));
    const Completion& c = done[Key(ids[1], sample)];
    EXPECT_EQ(c.finish_reason, "cancelled");
    const std::vector<std::int32_t>& full = expected[static_cast<std::size_t>(1 + sample)].tokens;
    ASSERT_LT(c.tokens.size(), full.size());
    EXPECT_GE(c.tokens.size(), 3u);
    EXPECT_EQ(c.tokens, std::vector<std::int32_t>(full.begin(), full.begin() + c.tokens.size()));
  }
  engine.cancel(ids[1]);  // finished: nothing happens
  engine.cancel(12345);   // unknown: nothing happens
  engine.cancel(ids[0]);
  engine.step();
  EXPECT_EQ(engine.running(), 0);
  const engine::EngineMetrics metrics = engine.metrics();
  EXPECT_EQ(metrics.kv_pages_used, metrics.kv_pages_cached) << "own pages back within the step";
  EXPECT_EQ(metrics.finished_cancelled, 4);
  for (int s = 0; s < 3 && engine.step(); ++s) {
  }
  EXPECT_FALSE(engine.step());
  EXPECT_EQ(done.size(), 4u);
}

// The counters a server exports: requests, completions by finish reason, prompt and generated
// tokens, running and waiting sequences, KV pages used / cached / shared; token events carry
// their index and a time that never goes back.
TEST(EngineService, MetricsCountRequestsTokensAndPages) {
  const test::FixtureModel m = test::load_fixture_model("tiny-llama");
  std::mt19937 rng(61);
  const auto shared = test::random_tokens(rng, 70, 512);
  std::vector<GenerationRequest> requests{test::greedy_request(test::extended(shared, rng, 5), 9, 2),
                                          test::greedy_request(test::extended(shared, rng, 8), 7),
                                          test::greedy_request({1, 2, 600}, 4)};  // outside the vocabulary
  requests.push_back(test::greedy_request(test::random_tokens(rng, 12, 512), 30));
  for (std::int32_t id = 0; id < 512; id += 2) requests.back().stop_token_ids.push_back(id);
  auto runner = cpu_runner(m);
  std::map<Key, std::int64_t> next_index;
  std::chrono::steady_clock::time_point last{};
  std::int64_t events = 0;
  engine::EngineOptions options;
  options.on_token = [&](const engine::TokenEvent& e) {
    EXPECT_EQ(e.index, next_index[Key(e.request, e.sample)]++);
    EXPECT_GE(e.time, last);
    last = e.time;
    ++events;
  };
  engine::Engine engine(*runner, options);
  for (const GenerationRequest& r : requests) engine.submit(r);
  engine.admit_and_prefill();
  engine::EngineMetrics metrics = engine.metrics();
  EXPECT_EQ(metrics.running, 4);
  EXPECT_EQ(metrics.waiting, 0);
  EXPECT_GT(metrics.kv_pages_shared, 0) << "the shared prompt is held by three sequences";
  EXPECT_EQ(metrics.kv_pages_cached, 0);
  EXPECT_GT(metrics.kv_pages_used, metrics.kv_pages_shared);
  for (int s = 0; s < kMostSteps && engine.step(); ++s) {
  }
  metrics = engine.metrics();
  EXPECT_EQ(metrics.requests, 4);
  EXPECT_EQ(metrics.finished_error, 1);
  EXPECT_EQ(metrics.finished_length, 3);
  EXPECT_EQ(metrics.finished_stop + metrics.finished_length, 4);
  EXPECT_EQ(metrics.finished_cancelled, 0);
  EXPECT_EQ(metrics.prompt_tokens, 75 + 78 + 12);
  EXPECT_EQ(metrics.generated_tokens, events);
  EXPECT_EQ(metrics.generated_tokens, 9 * 2 + 7 + next_index[Key(3, 0)]);
  EXPECT_EQ(metrics.running + metrics.waiting, 0);
  EXPECT_EQ(metrics.kv_pages, 256);
  EXPECT_EQ(metrics.kv_pages_used, metrics.kv_pages_cached);
  EXPECT_EQ(metrics.kv_pages_shared, 0);
  EXPECT_EQ(metrics.preemptions, 0);
}

}  // namespace
}  // namespace hydragen
