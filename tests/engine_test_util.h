// Shared by the engine tests (CPU and CUDA): fixture models, runners, and helpers that run
// requests through an Engine.
#pragma once

#include <filesystem>
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

inline std::vector<engine::Completion> run_engine(engine::ModelRunner& runner,
                                                  const std::vector<engine::GenerationRequest>& requests,
                                                  engine::EngineOptions options = {}) {
  engine::Engine engine(runner, std::move(options));
  return engine.generate(requests);
}

}  // namespace hydragen::test
