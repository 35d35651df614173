// Shared by the engine tests (CPU and CUDA): fixture models, runners, and helpers that run
// requests through an Engine.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "engine/engine.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "test_model_fixtures.h"

namespace hydragen::test {

struct FixtureModel {
  ModelConfig config;
  LlamaWeights weights;  // f32 CPU
  nlohmann::json reference;
};

inline FixtureModel load_fixture_model(const std::string& variant) {
  const std::filesystem::path dir = model_fixture_dir() / variant;
  FixtureModel m;
  m.config = load_model_config(dir);
  m.weights = load_weights(m.config, Checkpoint(dir));
  m.reference = read_json(dir / "reference.json");
  return m;
}

inline std::unique_ptr<engine::ModelRunner> cpu_runner(const FixtureModel& m, std::int64_t pages = 256,
                                                       int page_size = 16) {
  engine::RunnerOptions options;
  options.kv_pages = pages;
  options.page_size = page_size;
  return engine::make_cpu_runner(m.config, m.weights, options);
}

inline engine::GenerationRequest greedy_request(std::vector<std::int32_t> prompt, std::int64_t new_tokens, int n = 1) {
  engine::GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_new_tokens = new_tokens;
  r.n = n;
  return r;
}

inline engine::EngineOptions with(AttentionMode attention) {
  engine::EngineOptions o;
  o.attention = attention;
  return o;
}

inline std::vector<std::int32_t> random_tokens(std::mt19937& rng, std::int64_t count, std::int32_t vocab) {
  std::uniform_int_distribution<std::int32_t> token(3, vocab - 1);
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < count; ++i) out.push_back(token(rng));
  return out;
}

// `prefix` followed by `count` random tokens.
inline std::vector<std::int32_t> extended(std::vector<std::int32_t> prefix, std::mt19937& rng, std::int64_t count) {
  const std::vector<std::int32_t> tail = random_tokens(rng, count, 512);
  prefix.insert(prefix.end(), tail.begin(), tail.end());
  return prefix;
}

// A runner that forwards everything to the runner it wraps; checkers override what they watch.
class ForwardingRunner : public engine::ModelRunner {
 public:
  explicit ForwardingRunner(std::unique_ptr<engine::ModelRunner> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  int page_size() const override { return inner_->page_size(); }
  std::int64_t kv_pages() const override { return inner_->kv_pages(); }
  std::int64_t kv_bytes_per_token() const override { return inner_->kv_bytes_per_token(); }
  std::string device_name() const override { return inner_->device_name(); }
  std::int64_t max_step_rows() const override { return inner_->max_step_rows(); }
  std::int64_t max_sampled_rows() const override { return inner_->max_sampled_rows(); }
  plan::PlanOptions plan_options(AttentionMode mode) const override { return inner_->plan_options(mode); }
  void copy_slots(std::span<const std::int32_t> src, std::span<const std::int32_t> dst) override {
    inner_->copy_slots(src, dst);
  }
  void launch(const engine::StepWork& step) override { inner_->launch(step); }
  engine::SampledTokens collect() override { return inner_->collect(); }

 protected:
  std::unique_ptr<engine::ModelRunner> inner_;
};

// Each completion's tokens as on_token streamed them, by (request, sample).
struct StreamedTokens {
  std::map<std::pair<engine::RequestId, int>, std::vector<std::int32_t>> tokens;
  void operator()(const engine::TokenEvent& e) { tokens[{e.request, e.sample}].push_back(e.token); }
};

// `count` greedy requests of `new_tokens` tokens under one shared prompt of `prefix` random
// tokens, request i with tail(i) random tokens of its own after it.
template <class Tail>
std::vector<engine::GenerationRequest> under_one_prompt(std::mt19937& rng, std::int64_t prefix, int count, Tail tail,
                                                        std::int64_t new_tokens) {
  const std::vector<std::int32_t> shared = random_tokens(rng, prefix, 512);
  std::vector<engine::GenerationRequest> requests;
  for (int i = 0; i < count; ++i) requests.push_back(greedy_request(extended(shared, rng, tail(i)), new_tokens));
  return requests;
}

inline std::vector<engine::Completion> run_engine(engine::ModelRunner& runner,
                                                  const std::vector<engine::GenerationRequest>& requests,
                                                  engine::EngineOptions options = {}) {
  engine::Engine engine(runner, std::move(options));
  return engine.generate(requests);
}

}  // namespace hydragen::test
