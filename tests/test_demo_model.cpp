// The demo model (models/demo) against its committed reference (tests/fixtures/demo: the
// logits and greedy tokens of the exported bf16 weights in fp32, by transformers when
// scripts/demo-model-gpu made it, else by the training script's torch model): the C++
// tokenizer gives the training encoder's prompt ids, the logits of every prompt position
// agree in every attention mode, and the engine's greedy tokens are torch's, for all prompts
// decoded as one batch and for several samples of one prompt whose K/V is stored once.
// The tokenizer's full string set is checked with the other tokenizer fixtures (test_tokenizer.cpp).
#include <gtest/gtest.h>

#include "demo_model_fixtures.h"
#include "engine_test_util.h"
#include "model/llama.h"
#include "paged_model_util.h"
#include "tokenizer/tokenizer.h"

namespace hydragen {
namespace {

constexpr AttentionMode kModes[] = {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense};

using DemoModel = test::FixtureModel;

DemoModel load_demo() {
  const std::filesystem::path dir = test::demo_model_dir();
  DemoModel m;
  m.config = load_model_config(dir);
  m.weights = load_weights(m.config, Checkpoint(dir));  // bf16 on disk, f32 here
  m.reference = test::read_json(test::demo_fixture_dir() / "reference.json");
  return m;
}

std::vector<std::int32_t> ids(const nlohmann::json& list) { return list.get<std::vector<std::int32_t>>(); }

// A K/V pool of 64 MiB (16K tokens of this model), not the CPU runner's default 1 GiB.
std::unique_ptr<engine::ModelRunner> small_pool_runner(const DemoModel& m) {
  engine::RunnerOptions options;
  options.kv_memory_bytes = std::int64_t{64} << 20;
  return engine::make_cpu_runner(m.config, m.weights, options);
}

engine::GenerationRequest greedy_until_eos(const DemoModel& m, const nlohmann::json& prompt, int n = 1) {
  engine::GenerationRequest r = test::greedy_request(ids(prompt.at("ids")),
                                                     m.reference.at("greedy_tokens").get<std::int64_t>(), n);
  r.stop_token_ids = config_special_tokens(test::demo_model_dir(), m.config.vocab_size).eos_ids;
  return r;
}

TEST(DemoModel, TokenizerGivesTheTrainingEncodersPromptIds) {
  const DemoModel m = load_demo();
  const auto tokenizer = load_tokenizer(test::demo_model_dir());
  ASSERT_EQ(tokenizer->vocab_size(), m.config.vocab_size);
  ASSERT_TRUE(tokenizer->special_tokens().bos_id.has_value());
  const SpecialTokens from_config = config_special_tokens(test::demo_model_dir(), m.config.vocab_size);
  EXPECT_EQ(tokenizer->special_tokens().bos_id, from_config.bos_id);
  ASSERT_EQ(from_config.eos_ids.size(), 1u);
  EXPECT_EQ(tokenizer->special_tokens().eos_ids, from_config.eos_ids);
  for (const auto& p : m.reference.at("prompts")) {
    EXPECT_EQ(tokenizer->encode(p.at("text").get<std::string>(), true), ids(p.at("ids"))) << p.at("text");
    EXPECT_EQ(tokenizer->decode(ids(p.at("greedy")), false), p.at("greedy_text").get<std::string>());
  }
}

TEST(DemoModel, LogitsMatchTheTorchModelInEveryMode) {
  const DemoModel m = load_demo();
  const Llama model(m.config, m.weights);
  test::CpuStepper stepper(model);
  SafetensorsFile logits_file(test::demo_fixture_dir() / "reference_logits.safetensors");
  const auto& prompts = m.reference.at("prompts");
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const auto* entry = logits_file.header().find("logits." + std::to_string(p));
    ASSERT_NE(entry, nullptr) << "logits." << p;
    const Tensor expected = logits_file.read(*entry, DType::f32);
    for (AttentionMode mode : kModes) {
      const Tensor actual = test::paged_logits(stepper, mode, ids(prompts[p].at("ids")));
      ASSERT_EQ(actual.shape(), expected.shape());
      EXPECT_LT(test::relative_error(actual, expected), 1e-4) << "prompt " << p << " mode " << mode_name(mode);
    }
  }
}

TEST(DemoModel, EngineGreedyEqualsTheTorchModelInEveryMode) {
  const DemoModel m = load_demo();
  std::vector<engine::GenerationRequest> requests;
  std::vector<std::vector<std::int32_t>> expected;
  for (const auto& p : m.reference.at("prompts")) {
    requests.push_back(greedy_until_eos(m, p));
    expected.push_back(ids(p.at("greedy")));
  }
  for (AttentionMode mode : kModes) {
    auto runner = small_pool_runner(m);
    const std::vector<engine::Completion> out = test::run_engine(*runner, requests, test::with(mode));
    ASSERT_EQ(out.size(), expected.size());
    for (std::size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i].tokens, expected[i]) << mode_name(mode) << " prompt " << i;
    }
  }
}

// Eight greedy samples of one prompt: its K/V is computed and stored once (all but its last
// token, which each sample feeds as its first decode step), and each is torch's continuation.
TEST(DemoModel, SamplesOfOnePromptEachEqualTheTorchModel) {
  const DemoModel m = load_demo();
  const auto& first = m.reference.at("prompts").at(0);
  auto runner = small_pool_runner(m);
  engine::Engine engine(*runner, {});
  const std::vector<engine::GenerationRequest> request = {greedy_until_eos(m, first, 8)};
  const auto out = engine.generate(request);
  EXPECT_EQ(engine.stats().prefill_tokens, static_cast<std::int64_t>(first.at("ids").size()) - 1);
  ASSERT_EQ(out.size(), 8u);
  for (const auto& c : out) EXPECT_EQ(c.tokens, ids(first.at("greedy"))) << "sample " << c.sample;
}

}  // namespace
}  // namespace hydragen
