// The device sampler (src/backend/cuda/sampling.h) against its CPU twin on random rows with
// random penalties, histories and top-N: identical tokens and top-N tokens, logprobs within
// 1e-4. Rows mix greedy and sampled params; a sampled row is kept only where no cut lies
// within 1e-4 of the mass (the twins sum in other orders), so equality is robust.
// Vocabularies 1000, 32000 (shared-memory row), 152064 (read from global memory) and
// 2000000 (past the held-token bitmap). Then the same through the CUDA runner and engine.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "hydragen/error.h"
#include "hydragen/tensor.h"
#include "core/counter_rng.h"
#include "engine_test_util.h"
#include "sample/sampling.h"
#include "sampling_test_util.h"
#ifdef HYDRAGEN_WITH_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/sampling.h"
#endif

namespace hydragen::sample {
namespace {

constexpr double kMargin = 1e-4;  // of the kept mass: how far every cut must lie from the draw

// Logits ~ 3 N(0, 1) (Box-Muller over the counter hash) with two -inf per row; `quantised`
// rounds them to quarters, so ties at the thresholds and at the argmax are common.
Tensor random_logits(std::int64_t rows, std::int64_t vocab, std::uint64_t seed, bool quantised) {
  Tensor t = Tensor::empty({rows, vocab}, DType::f32);
  const std::uint64_t key = stream_key(seed, 1);
  float* v = t.data<float>();
  for (std::int64_t i = 0; i < rows * vocab; ++i) {
    const double u1 = 0.5 * (counter_uniform(key, 2 * i) + 1.0) + 1e-9, u2 = counter_uniform(key, 2 * i + 1);
    const double x = 3.0 * std::sqrt(-2.0 * std::log(u1)) * std::cos(3.14159265358979 * u2);
    v[i] = static_cast<float>(quantised ? std::round(4.0 * x) / 4.0 : x);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    v[r * vocab + (r * 7919) % vocab] = -INFINITY;
    v[r * vocab + (r * 104729 + 3) % vocab] = -INFINITY;
  }
  return t;
}

struct RowPlan {
  test::StepInputs in;  // params, steps, input tokens, history
  int sampled = 0;
};

// A sequence for row `r` of `logits`: a prompt of 1..24 tokens and 0..23 generated ones, drawn
// from 40 tokens (so they repeat) that hold the row's argmax half the time (so penalties move
// greedy rows).
test::SequenceTokens random_sequence(const Tensor& logits, std::int64_t r, std::uint64_t key, std::uint64_t& n) {
  const std::int64_t vocab = logits.size(1);
  const float* row = logits.data<float>() + r * vocab;
  const auto best = static_cast<std::int32_t>(std::max_element(row, row + vocab) - row);
  const auto pick = [&](int options) {
    return static_cast<int>(0.5f * (counter_uniform(key, n++) + 1.f) * static_cast<float>(options)) % options;
  };
  std::vector<std::int32_t> pool;
  for (int i = 0; i < 40; ++i) pool.push_back(static_cast<std::int32_t>((r * 7 + i * 104729) % vocab));
  if (pick(2) == 0) pool[0] = best;
  test::SequenceTokens seq;
  for (int i = 0, len = 1 + pick(24); i < len; ++i) seq.prompt.push_back(pool[static_cast<std::size_t>(pick(40))]);
  for (int i = 0, len = pick(24); i < len; ++i) seq.generated.push_back(pool[static_cast<std::size_t>(pick(40))]);
  return seq;
}

// A quarter of the rows greedy; the others draw params and a step from the counter hash
// until every cut is clear of rounding (kMargin), or fall back to greedy. Every row draws
// penalties (none, one of three, or all) and a top-N, and a sequence for them.
RowPlan plan_rows(const Tensor& logits, std::uint64_t seed) {
  const std::int64_t rows = logits.size(0), vocab = logits.size(1);
  const float temperatures[] = {0.5f, 0.8f, 1.f, 1.3f};
  const std::int32_t top_ks[] = {0, 0, 1, 5, 50, 200, static_cast<std::int32_t>(vocab) + 5};
  const float top_ps[] = {1.f, 1.f, 0.9f, 0.6f};
  const float min_ps[] = {0.f, 0.f, 0.05f, 0.3f};
  const int logprobs[] = {0, 0, 1, 5, sample::kMaxTopLogprobs};
  const std::uint64_t key = stream_key(seed, 2);
  std::uint64_t n = 0;
  const auto pick = [&](int options) {
    return static_cast<int>(0.5f * (counter_uniform(key, n++) + 1.f) * static_cast<float>(options)) % options;
  };
  const auto with_penalties = [&](SamplingParams p) {
    const int which = pick(5);  // 0: none
    if (which == 1 || which == 4) p.presence_penalty = which == 1 ? 1.5f : -0.5f;
    if (which == 2 || which == 4) p.frequency_penalty = which == 2 ? 0.7f : 0.3f;
    if (which == 3 || which == 4) p.repetition_penalty = which == 3 ? 1.3f : 0.8f;
    p.logprobs = logprobs[pick(5)];
    return p;
  };
  RowPlan plan;
  for (std::int64_t r = 0; r < rows; ++r) {
    const test::SequenceTokens seq = random_sequence(logits, r, key, n);
    const std::span<const float> row(logits.data<float>() + r * vocab, static_cast<std::size_t>(vocab));
    SamplingParams p = with_penalties(SamplingParams{});  // greedy
    for (int attempt = 0; r % 4 != 0 && attempt < 24; ++attempt) {
      SamplingParams candidate;
      candidate.temperature = temperatures[pick(4)];
      candidate.top_k = top_ks[pick(7)];
      candidate.top_p = top_ps[pick(4)];
      candidate.min_p = min_ps[pick(4)];
      candidate.seed = seed * 1000003 + static_cast<std::uint64_t>(r * 31 + attempt);
      if (attempt == 0 && r % 4 == 1) candidate = {0.8f, 50, 0.9f, 0.f, candidate.seed};  // the paper's setting
      candidate = with_penalties(candidate);
      const auto f = reference::filtered_distribution(seq.penalized(row, candidate), candidate);
      const auto draw = reference::reference_draw(f.probabilities, sampling_uniform(candidate.seed, seq.step()));
      if (f.top_p_margin >= kMargin && f.min_p_clear && draw.margin >= kMargin) {
        p = candidate;
        ++plan.sampled;
        break;
      }
    }
    plan.in.add(p, seq);
  }
  return plan;
}

#ifdef HYDRAGEN_WITH_CUDA
// Device copies of a row plan (arrays of capacity for `rows` rows and `entries` history
// entries, so a captured graph can replay with another plan), outputs poisoned.
struct DeviceRows {
  Tensor params, steps, inputs, offsets, history, tokens, logprobs, top;
  DeviceRows(std::int64_t rows, std::int64_t entries)
      : params(Tensor::empty({rows, static_cast<std::int64_t>(sizeof(SamplingParams) / 4)}, DType::i32, Device::cuda)),
        steps(Tensor::empty({rows, 2}, DType::i32, Device::cuda)),
        inputs(Tensor::empty({rows}, DType::i32, Device::cuda)),
        offsets(Tensor::empty({rows + 1}, DType::i32, Device::cuda)),
        history(Tensor::empty({std::max<std::int64_t>(entries, 1), 2}, DType::i32, Device::cuda)),
        tokens(Tensor::empty({rows}, DType::i32, Device::cuda)),
        logprobs(Tensor::empty({rows}, DType::f32, Device::cuda)),
        top(Tensor::empty({rows, sample::kMaxTopLogprobs, 2}, DType::i32, Device::cuda)) {}

  void upload(const RowPlan& plan) {
    const test::StepInputs& in = plan.in;
    params.copy_from(Tensor::wrap(const_cast<SamplingParams*>(in.params.data()), params.shape(), DType::i32));
    steps.copy_from(Tensor::wrap(const_cast<std::uint64_t*>(in.steps.data()), steps.shape(), DType::i32));
    inputs.copy_from(Tensor::wrap(const_cast<std::int32_t*>(in.inputs.data()), inputs.shape(), DType::i32));
    offsets.copy_from(Tensor::wrap(const_cast<std::int32_t*>(in.history.offsets.data()), offsets.shape(), DType::i32));
    const auto entries = static_cast<std::int64_t>(in.history.entries.size());
    ASSERT_LE(entries, history.size(0)) << "DeviceRows: history past its capacity";
    if (entries > 0)
      history.slice(0, 0, entries)
          .copy_from(Tensor::wrap(const_cast<TokenCount*>(in.history.entries.data()), {entries, 2}, DType::i32));
    std::vector<std::int32_t> minus_one(static_cast<std::size_t>(tokens.numel()), -1);
    std::vector<float> nan(static_cast<std::size_t>(tokens.numel()), NAN);
    std::vector<TokenLogprob> poison(static_cast<std::size_t>(top.numel() / 2), TokenLogprob{-1, NAN});
    tokens.copy_from(Tensor::wrap(minus_one.data(), tokens.shape(), DType::i32));
    logprobs.copy_from(Tensor::wrap(nan.data(), logprobs.shape(), DType::f32));
    top.copy_from(Tensor::wrap(poison.data(), top.shape(), DType::i32));
  }
  // The runner's call: the tokens copied into the input tokens (read before they are
  // written), on every other run, so both calls are covered (expect_matches_cpu checks it; a
  // graph's replays repeat the captured run's choice).
  void run(const Tensor& device_logits, void* stream = nullptr) {
    copies = runs++ % 2 == 0;
    cuda::SamplingArgs args;
    args.params = static_cast<const SamplingParams*>(params.raw());
    args.steps = static_cast<const std::uint64_t*>(steps.raw());
    args.input_tokens = inputs.data<std::int32_t>();
    args.history_offsets = offsets.data<std::int32_t>();
    args.history = static_cast<const TokenCount*>(history.raw());
    args.tokens = tokens.data<std::int32_t>();
    args.logprobs = logprobs.data<float>();
    args.top = static_cast<TokenLogprob*>(top.raw());
    args.tokens_copy = copies ? inputs.data<std::int32_t>() : nullptr;
    cuda::sample_rows(device_logits, args, stream);
  }
  int runs = 0;
  bool copies = false;  // the last run wrote its tokens into `inputs`
};

// The device's tokens, logprobs and top-N against the CPU twin's.
void expect_matches_cpu(const Tensor& logits, const RowPlan& plan, const DeviceRows& device, const std::string& label) {
  const auto rows = static_cast<std::size_t>(logits.size(0));
  const test::Draws cpu = test::sample(logits, plan.in);
  const Tensor device_tokens = device.tokens.to(Device::cpu), device_logprobs = device.logprobs.to(Device::cpu);
  const Tensor device_top = device.top.to(Device::cpu);
  const auto* top = static_cast<const TokenLogprob*>(device_top.raw());
  int token_mismatches = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const SamplingParams& p = plan.in.params[r];
    const std::string row = label + " row " + std::to_string(r) + " (T " + std::to_string(p.temperature) + " k " +
                            std::to_string(p.top_k) + " p " + std::to_string(p.top_p) + " min_p " +
                            std::to_string(p.min_p) + " presence " + std::to_string(p.presence_penalty) +
                            " frequency " + std::to_string(p.frequency_penalty) + " repetition " +
                            std::to_string(p.repetition_penalty) + " logprobs " + std::to_string(p.logprobs) + ")";
    const std::int32_t token = device_tokens.data<std::int32_t>()[r];
    if (token != cpu.tokens[r] && ++token_mismatches > 10) continue;  // report the first few
    EXPECT_EQ(token, cpu.tokens[r]) << row;
    EXPECT_NEAR(device_logprobs.data<float>()[r], cpu.logprobs[r], 1e-4) << row;
    for (std::size_t j = 0; j < static_cast<std::size_t>(sample::kMaxTopLogprobs); ++j) {
      const TokenLogprob d = top[r * sample::kMaxTopLogprobs + j], c = cpu.top[r * sample::kMaxTopLogprobs + j];
      EXPECT_EQ(d.token, c.token) << row << " top " << j;  // -1 past min(N, vocab): unwritten on both
      if (c.token >= 0 && std::isfinite(c.logprob)) EXPECT_NEAR(d.logprob, c.logprob, 1e-4) << row << " top " << j;
      if (c.token >= 0 && !std::isfinite(c.logprob)) EXPECT_EQ(d.logprob, c.logprob) << row << " top " << j;
    }
  }
  EXPECT_EQ(token_mismatches, 0) << label;
  // The input tokens hold the sampled tokens where the run copied them, and are untouched where not.
  const Tensor inputs = device.inputs.to(Device::cpu);
  for (std::size_t r = 0; r < rows; ++r)
    EXPECT_EQ(inputs.data<std::int32_t>()[r], device.copies ? device_tokens.data<std::int32_t>()[r] : plan.in.inputs[r])
        << label << " row " << r << ": tokens_copy";
}
#endif

TEST(CudaSampling, MatchesTheCpuTwinOnRandomRows) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  struct Shape {
    std::int64_t rows, vocab;
  };
  // 1000 and 32000: the row in shared memory; 152064: read from global memory, held tokens in
  // a bitmap; 2000000: past the bitmap, every token looked up.
  const Shape shapes[] = {{1, 1000},   {37, 1000},    {300, 1000}, {1, 32000},
                          {300, 32000}, {1, 152064}, {96, 152064}, {2, 2000000}};
  std::uint64_t seed = 1;
  for (const Shape& shape : shapes) {
    for (const bool quantised : {false, true}) {
      const std::string label = std::to_string(shape.rows) + " x " + std::to_string(shape.vocab) +
                                (quantised ? " quantised" : "");
      const Tensor logits = random_logits(shape.rows, shape.vocab, ++seed, quantised);
      const RowPlan plan = plan_rows(logits, seed);
      EXPECT_GE(plan.sampled, shape.rows / 2) << label << ": too few sampled rows survive the margin";
      DeviceRows device(shape.rows, static_cast<std::int64_t>(plan.in.history.entries.size()));
      device.upload(plan);
      const Tensor device_logits = logits.to(Device::cuda);
      device.run(device_logits);
      expect_matches_cpu(logits, plan, device, label);
      // Run to run, the device gives the same bits (no float atomics).
      const Tensor tokens = device.tokens.to(Device::cpu), logprobs = device.logprobs.to(Device::cpu);
      const Tensor top = device.top.to(Device::cpu);
      device.upload(plan);
      device.run(device_logits);
      const Tensor again_tokens = device.tokens.to(Device::cpu), again_logprobs = device.logprobs.to(Device::cpu);
      const Tensor again_top = device.top.to(Device::cpu);
      EXPECT_EQ(std::memcmp(tokens.raw(), again_tokens.raw(), tokens.bytes()), 0) << label;
      EXPECT_EQ(std::memcmp(logprobs.raw(), again_logprobs.raw(), logprobs.bytes()), 0) << label;
      EXPECT_EQ(std::memcmp(top.raw(), again_top.raw(), top.bytes()), 0) << label;
    }
  }
#endif
}

// New params, steps, input tokens and histories (penalties, top-N) behind the same pointers.
TEST(CudaSampling, ReplaysFromACapturedGraphWithNewParamsAndHistories) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  const std::int64_t rows = 64, vocab = 32000;
  const Tensor logits = random_logits(rows, vocab, 77, false);
  const Tensor device_logits = logits.to(Device::cuda);
  DeviceRows device(rows, rows * 48);  // a sequence holds at most 47 distinct tokens
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  device.run(device_logits, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (std::uint64_t replay = 0; replay < 3; ++replay) {
    const RowPlan plan = plan_rows(logits, 100 + replay);
    device.upload(plan);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    expect_matches_cpu(logits, plan, device, "replay " + std::to_string(replay));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
#endif
}

TEST(CudaSampling, RejectsBadArguments) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  const Tensor logits = random_logits(2, 100, 5, false);
  DeviceRows device(2, 8);
  EXPECT_THROW(device.run(logits), Error);  // CPU logits
  EXPECT_THROW(device.run(logits.to(Device::cuda).to(DType::bf16)), Error);
  const Tensor device_logits = logits.to(Device::cuda);
  test::expect_error([&] { cuda::sample_rows(device_logits, cuda::SamplingArgs{}); }, "got a null pointer");
  cuda::SamplingArgs half;  // input tokens without the history
  half.params = static_cast<const SamplingParams*>(device.params.raw());
  half.steps = static_cast<const std::uint64_t*>(device.steps.raw());
  half.tokens = device.tokens.data<std::int32_t>();
  half.logprobs = device.logprobs.data<float>();
  half.input_tokens = device.inputs.data<std::int32_t>();
  test::expect_error([&] { cuda::sample_rows(device_logits, half); }, "come together");
#endif
}

// ---- through the CUDA runner -------------------------------------------------------------

namespace fixture = hydragen::test;  // the engine tests' helpers (engine_test_util.h)

std::unique_ptr<engine::ModelRunner> cuda_runner(const fixture::FixtureModel& m, bool graphs) {
  engine::RunnerOptions options;
  options.kv_pages = 1024;
  options.page_size = 16;
  options.max_batch = 64;
  options.cuda_graphs = graphs;
  return engine::make_cuda_runner(m.config, m.weights, options);
}

// Penalties through the CUDA runner's staging (the history uploaded with each step, its
// buffers grown mid-run: 18 rows holding ~320 prompt tokens pass the first 4096 entries), with CUDA
// graphs on and off and overlapped steps (the input token fed on the device) on and off: the
// same tokens every way.
TEST(CudaSampling, EnginePenaltiesAgreeWithAndWithoutGraphsAndOverlap) {
  SKIP_WITHOUT_GPU();
  const fixture::FixtureModel m = fixture::load_fixture_model("tiny-llama");
  std::mt19937 rng(9);
  std::vector<engine::GenerationRequest> requests;
  for (int i = 0; i < 24; ++i) {
    engine::GenerationRequest r = fixture::greedy_request(fixture::random_tokens(rng, 500, 512), 12);
    r.sampling.temperature = i % 4 == 0 ? 0.f : 0.8f;
    r.sampling.top_k = 40;
    r.sampling.seed = 50 + static_cast<std::uint64_t>(i);
    r.sampling.presence_penalty = 0.2f;
    r.sampling.frequency_penalty = i % 3 == 0 ? 0.f : 0.5f;
    r.sampling.repetition_penalty = i % 4 == 3 ? 1.f : 1.3f;
    requests.push_back(std::move(r));
  }
  std::vector<std::vector<std::int32_t>> first;
  for (const bool graphs : {true, false}) {
    for (const bool overlap : {true, false}) {
      auto runner = cuda_runner(m, graphs);
      engine::EngineOptions options;
      options.overlap_steps = overlap;
      std::vector<std::vector<std::int32_t>> tokens;
      for (const engine::Completion& c : fixture::run_engine(*runner, requests, options)) tokens.push_back(c.tokens);
      EXPECT_EQ(runner->decodes_with_graphs(), graphs) << "a capture failed";
      if (first.empty()) first = tokens;
      EXPECT_EQ(tokens, first) << "graphs " << graphs << " overlap " << overlap;
    }
  }
}

// A frequency penalty breaks the greedy repetition loop on the device as on the CPU.
TEST(CudaSampling, AFrequencyPenaltyBreaksTheGreedyLoop) {
  SKIP_WITHOUT_GPU();
  const fixture::FixtureModel m = fixture::load_fixture_model("tiny-llama");
  const auto prompt = m.reference["prompts"][1].get<std::vector<std::int32_t>>();
  auto runner = cuda_runner(m, true);
  engine::GenerationRequest r = fixture::greedy_request(prompt, 96);
  const auto plain = fixture::run_engine(*runner, {r}).at(0).tokens;
  r.sampling.frequency_penalty = 2.f;
  const auto penalized = fixture::run_engine(*runner, {r}).at(0).tokens;
  EXPECT_GE(test::most_repeated(plain), 12) << "the unpenalized run does not loop: the test shows nothing";
  EXPECT_LE(test::most_repeated(penalized), 3);
}

// The CUDA runner's top-N, copied out only for a step that asks, with and without graphs.
TEST(CudaSampling, TheRunnerReturnsTheTopN) {
  SKIP_WITHOUT_GPU();
  const fixture::FixtureModel m = fixture::load_fixture_model("tiny-llama");
  for (const bool graphs : {true, false}) {
    auto runner = cuda_runner(m, graphs);
    test::expect_runner_top_n(*runner, graphs ? "graphs" : "no graphs");
  }
}

}  // namespace
}  // namespace hydragen::sample
