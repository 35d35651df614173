// The device sampler (src/backend/cuda/sampling.h) against its CPU twin on random rows:
// identical tokens, logprobs within 1e-4. Rows mix greedy and sampled params; a sampled row
// is kept only where no cut lies within 1e-4 of the mass (the twins sum in other orders), so
// equality is robust. Vocabularies 1000, 32000 (shared-memory row) and 152064 (read from
// global memory). Skipped without a CUDA device.
#include <gtest/gtest.h>

#include "cuda_test_util.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hydragen/error.h"
#include "hydragen/tensor.h"
#include "core/counter_rng.h"
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
  std::vector<SamplingParams> params;
  std::vector<std::uint64_t> steps;
  int sampled = 0;
};

// A quarter of the rows greedy; the others draw params and a step from the counter hash
// until every cut is clear of rounding (kMargin), or fall back to greedy.
RowPlan plan_rows(const Tensor& logits, std::uint64_t seed) {
  const std::int64_t rows = logits.size(0), vocab = logits.size(1);
  const float temperatures[] = {0.5f, 0.8f, 1.f, 1.3f};
  const std::int32_t top_ks[] = {0, 0, 1, 5, 50, 200, static_cast<std::int32_t>(vocab) + 5};
  const float top_ps[] = {1.f, 1.f, 0.9f, 0.6f};
  const float min_ps[] = {0.f, 0.f, 0.05f, 0.3f};
  const std::uint64_t key = stream_key(seed, 2);
  std::uint64_t n = 0;
  const auto pick = [&](int options) {
    return static_cast<int>(0.5f * (counter_uniform(key, n++) + 1.f) * static_cast<float>(options)) % options;
  };
  RowPlan plan;
  for (std::int64_t r = 0; r < rows; ++r) {
    SamplingParams p;  // greedy
    std::uint64_t step = static_cast<std::uint64_t>(r);
    for (int attempt = 0; r % 4 != 0 && attempt < 24; ++attempt) {
      SamplingParams candidate;
      candidate.temperature = temperatures[pick(4)];
      candidate.top_k = top_ks[pick(7)];
      candidate.top_p = top_ps[pick(4)];
      candidate.min_p = min_ps[pick(4)];
      candidate.seed = seed * 1000003 + static_cast<std::uint64_t>(r);
      if (attempt == 0 && r % 4 == 1) candidate = {0.8f, 50, 0.9f, 0.f, candidate.seed};  // the paper's setting
      const std::uint64_t candidate_step = static_cast<std::uint64_t>(r * 31 + attempt);
      const std::span<const float> row(logits.data<float>() + r * vocab, static_cast<std::size_t>(vocab));
      const auto f = reference::filtered_distribution(row, candidate);
      const auto draw = reference::reference_draw(f.probabilities, sampling_uniform(candidate.seed, candidate_step));
      if (f.top_p_margin >= kMargin && f.min_p_clear && draw.margin >= kMargin) {
        p = candidate;
        step = candidate_step;
        ++plan.sampled;
        break;
      }
    }
    plan.params.push_back(p);
    plan.steps.push_back(step);
  }
  return plan;
}

#ifdef HYDRAGEN_WITH_CUDA
// Device copies of the row plan: params as raw bytes, steps as u64, outputs poisoned.
struct DeviceRows {
  Tensor params, steps, tokens, logprobs, tokens_copy;
  explicit DeviceRows(std::int64_t rows)
      : params(Tensor::empty({rows, static_cast<std::int64_t>(sizeof(SamplingParams) / 4)}, DType::i32, Device::cuda)),
        steps(Tensor::empty({rows, 2}, DType::i32, Device::cuda)),
        tokens(Tensor::empty({rows}, DType::i32, Device::cuda)),
        logprobs(Tensor::empty({rows}, DType::f32, Device::cuda)),
        tokens_copy(Tensor::empty({rows}, DType::i32, Device::cuda)) {}

  void upload(const RowPlan& plan) {
    params.copy_from(Tensor::wrap(const_cast<SamplingParams*>(plan.params.data()), params.shape(), DType::i32));
    steps.copy_from(Tensor::wrap(const_cast<std::uint64_t*>(plan.steps.data()), steps.shape(), DType::i32));
    std::vector<std::int32_t> minus_one(static_cast<std::size_t>(tokens.numel()), -1);
    std::vector<float> nan(static_cast<std::size_t>(tokens.numel()), NAN);
    tokens.copy_from(Tensor::wrap(minus_one.data(), tokens.shape(), DType::i32));
    tokens_copy.copy_from(Tensor::wrap(minus_one.data(), tokens.shape(), DType::i32));
    logprobs.copy_from(Tensor::wrap(nan.data(), logprobs.shape(), DType::f32));
  }
  // tokens_copy on every other run, so both calls are covered (expect_matches_cpu checks it; a
  // graph's replays repeat the captured run's choice).
  void run(const Tensor& device_logits, void* stream = nullptr) {
    copies = runs++ % 2 == 0;
    cuda::sample_rows(device_logits, params.raw(), static_cast<const std::uint64_t*>(steps.raw()),
                      tokens.data<std::int32_t>(), logprobs.data<float>(), stream,
                      copies ? tokens_copy.data<std::int32_t>() : nullptr);
  }
  int runs = 0;
  bool copies = false;  // the last run wrote tokens_copy
};

// The device's tokens and logprobs against the CPU twin's.
void expect_matches_cpu(const Tensor& logits, const RowPlan& plan, const DeviceRows& device, const std::string& label) {
  const auto rows = static_cast<std::size_t>(logits.size(0));
  std::vector<std::int32_t> tokens(rows, -1);
  std::vector<float> logprobs(rows, NAN);
  sample_rows(logits, plan.params, plan.steps, tokens, logprobs);
  const Tensor device_tokens = device.tokens.to(Device::cpu), device_logprobs = device.logprobs.to(Device::cpu);
  int token_mismatches = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const SamplingParams& p = plan.params[r];
    const std::string row = label + " row " + std::to_string(r) + " (T " + std::to_string(p.temperature) + " k " +
                            std::to_string(p.top_k) + " p " + std::to_string(p.top_p) + " min_p " +
                            std::to_string(p.min_p) + ")";
    const std::int32_t token = device_tokens.data<std::int32_t>()[r];
    if (token != tokens[r] && ++token_mismatches > 10) continue;  // report the first few
    EXPECT_EQ(token, tokens[r]) << row;
    EXPECT_NEAR(device_logprobs.data<float>()[r], logprobs[r], 1e-4) << row;
  }
  EXPECT_EQ(token_mismatches, 0) << label;
  // The second output holds the same tokens where the run wrote it, and is untouched (-1) where not.
  const Tensor copied = device.tokens_copy.to(Device::cpu);
  for (std::size_t r = 0; r < rows; ++r)
    EXPECT_EQ(copied.data<std::int32_t>()[r], device.copies ? device_tokens.data<std::int32_t>()[r] : -1)
        << label << " row " << r << ": tokens_copy";
}
#endif

TEST(CudaSampling, MatchesTheCpuTwinOnRandomRows) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  struct Shape {
    std::int64_t rows, vocab;
  };
  const Shape shapes[] = {{1, 1000}, {37, 1000}, {300, 1000}, {1, 32000}, {300, 32000}, {1, 152064}, {96, 152064}};
  std::uint64_t seed = 1;
  for (const Shape& shape : shapes) {
    for (const bool quantised : {false, true}) {
      const std::string label = std::to_string(shape.rows) + " x " + std::to_string(shape.vocab) +
                                (quantised ? " quantised" : "");
      const Tensor logits = random_logits(shape.rows, shape.vocab, ++seed, quantised);
      const RowPlan plan = plan_rows(logits, seed);
      EXPECT_GE(plan.sampled, shape.rows / 2) << label << ": too few sampled rows survive the margin";
      DeviceRows device(shape.rows);
      device.upload(plan);
      const Tensor device_logits = logits.to(Device::cuda);
      device.run(device_logits);
      expect_matches_cpu(logits, plan, device, label);
      // Run to run, the device gives the same bits (no float atomics).
      const Tensor tokens = device.tokens.to(Device::cpu), logprobs = device.logprobs.to(Device::cpu);
      device.upload(plan);
      device.run(device_logits);
      const Tensor again_tokens = device.tokens.to(Device::cpu), again_logprobs = device.logprobs.to(Device::cpu);
      EXPECT_EQ(std::memcmp(tokens.raw(), again_tokens.raw(), tokens.bytes()), 0) << label;
      EXPECT_EQ(std::memcmp(logprobs.raw(), again_logprobs.raw(), logprobs.bytes()), 0) << label;
    }
  }
#endif
}

TEST(CudaSampling, ReplaysFromACapturedGraphWithNewParamsAndSteps) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  const std::int64_t rows = 64, vocab = 32000;
  const Tensor logits = random_logits(rows, vocab, 77, false);
  const Tensor device_logits = logits.to(Device::cuda);
  DeviceRows device(rows);
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
  DeviceRows device(2);
  EXPECT_THROW(device.run(logits), Error);  // CPU logits
  EXPECT_THROW(device.run(logits.to(Device::cuda).to(DType::bf16)), Error);
  EXPECT_THROW(cuda::sample_rows(logits.to(Device::cuda), nullptr, nullptr, nullptr, nullptr), Error);
#endif
}

}  // namespace
}  // namespace hydragen::sample
