// The CPU forward pass against transformers (tests/fixtures/model, written by
// scripts/make-reference.py), driven through the paged forward (paged_model_util.h): logits
// within 1e-4 relative at every prompt position in every attention mode, and greedy
// continuations identical in every mode, alone and as a batch under a shared prefix.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "plan/paged_plan.h"
#include "model/llama.h"
#include "model/llama_cuda.h"
#include "model/model_config.h"
#include "model/paged_kv.h"
#include "model/rope.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "paged_model_util.h"
#include "test_model_fixtures.h"

namespace hydragen {
namespace {

constexpr AttentionMode kModes[] = {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense};

struct Reference {
  std::filesystem::path dir;
  nlohmann::json record;
  Llama model;
};

Reference load_reference(const std::string& variant) {
  const std::filesystem::path dir = test::model_fixture_dir() / variant;
  const ModelConfig config = load_model_config(dir);
  Checkpoint checkpoint(dir);
  return Reference{dir, test::read_json(dir / "reference.json"), Llama(config, load_weights(config, checkpoint))};
}

std::vector<std::int32_t> ids(const nlohmann::json& list) { return list.get<std::vector<std::int32_t>>(); }

using test::relative_error;

class ModelReference : public ::testing::TestWithParam<std::string> {};

// Each prompt's first half prefilled as a segment, the rest as its sequence's own tokens: every
// position's logits, through each mode's plan.
TEST_P(ModelReference, LogitsMatchTransformersInEveryMode) {
  const Reference ref = load_reference(GetParam());
  test::CpuStepper stepper(ref.model);
  SafetensorsFile logits_file(ref.dir / "reference_logits.safetensors");
  const auto& prompts = ref.record.at("prompts");
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const auto* entry = logits_file.header().find("logits." + std::to_string(p));
    ASSERT_NE(entry, nullptr);
    const Tensor expected = logits_file.read(*entry, DType::f32);
    for (AttentionMode mode : kModes) {
      const Tensor actual = test::paged_logits(stepper, mode, ids(prompts[p]));
      ASSERT_EQ(actual.shape(), expected.shape());
      EXPECT_LT(relative_error(actual, expected), 1e-4) << GetParam() << " prompt " << p << " mode " << mode_name(mode);
    }
  }
}

TEST_P(ModelReference, GreedyTokensMatchTransformersInEveryMode) {
  const Reference ref = load_reference(GetParam());
  test::CpuStepper stepper(ref.model);
  for (const auto& run : ref.record.at("greedy")) {
    const std::vector<std::int32_t> prompt = ids(ref.record.at("prompts")[run.at("prompt_index").get<int>()]);
    const std::vector<std::int32_t> expected = ids(run.at("tokens"));
    for (AttentionMode mode : kModes)
      EXPECT_EQ(test::paged_greedy(stepper, mode, prompt, static_cast<std::int64_t>(expected.size())), expected)
          << GetParam() << " prompt " << run.at("prompt_index") << " mode " << mode_name(mode);
  }
}

// Both greedy prompts start with BOS: decode them as one batch whose BOS is a shared tree
// segment; every mode must give transformers' tokens for both.
TEST_P(ModelReference, GreedyUnderSharedPrefixMatchesInEveryMode) {
  const Reference ref = load_reference(GetParam());
  test::CpuStepper stepper(ref.model);
  std::vector<std::vector<std::int32_t>> suffixes, expected;
  std::vector<std::int32_t> prefix;
  for (const auto& run : ref.record.at("greedy")) {
    const std::vector<std::int32_t> prompt = ids(ref.record.at("prompts")[run.at("prompt_index").get<int>()]);
    prefix = {prompt[0]};
    suffixes.emplace_back(prompt.begin() + 1, prompt.end());
    expected.push_back(ids(run.at("tokens")));
  }
  for (AttentionMode mode : kModes) {
    EXPECT_EQ(test::paged_greedy(stepper, mode, prefix, suffixes, static_cast<std::int64_t>(expected[0].size())),
              expected)
        << GetParam() << " mode " << mode_name(mode);
  }
}

TEST_P(ModelReference, RopeFrequenciesMatchTransformers) {
  const std::filesystem::path dir = test::model_fixture_dir() / GetParam();
  const nlohmann::json record = test::read_json(dir / "reference.json");
  const std::vector<float> expected = record.at("inv_freq").get<std::vector<float>>();
  const std::vector<float> actual = rope_inv_freq(load_model_config(dir));
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(actual[i], expected[i], 1e-6 * expected[i]) << i;
}

// `none` skips attention and keeps the projections (the paper's throughput ceiling): its step
// writes every layer's K and V of every row, and layer 0's K and V (computed before any
// attention) are exactly those of a step with attention. Slots past the rows, poisoned, stay
// untouched.
TEST_P(ModelReference, NoneModeStepStillWritesEveryLayersKv) {
  const Reference ref = load_reference(GetParam());
  const ModelConfig& config = ref.model.config();
  const StepRows rows = test::prompt_rows(ids(ref.record.at("prompts")[0]));
  const std::int64_t n = rows.size();
  plan::PagedLayout layout;
  layout.page_size = 16;
  layout.kv_heads = static_cast<int>(config.num_kv_heads), layout.q_heads = static_cast<int>(config.num_heads);
  layout.head_dim = static_cast<int>(config.head_dim);
  const std::int64_t pages = (n + 15) / 16 + 1;
  std::vector<std::int32_t> page_ids;
  for (std::int32_t p = 0; p < (n + 15) / 16; ++p) page_ids.push_back(p);
  layout.sequences.push_back({kNoParent, n, page_ids, static_cast<int>(n)});
  const plan::AttentionPlan plan = plan::build_attention_plan(layout);

  PagedKv none = test::poisoned_pool(config, pages, 16), attended = test::poisoned_pool(config, pages, 16);
  const Tensor none_logits = ref.model.forward_paged(rows, nullptr, none, true);
  const Tensor logits = ref.model.forward_paged(rows, &plan, attended, true);
  EXPECT_GT(relative_error(none_logits, logits), 1e-3) << "without attention the logits should differ";
  const std::int64_t row_floats = config.num_kv_heads * config.head_dim;
  for (std::int64_t l = 0; l < none.layers(); ++l) {
    const Tensor k = none.k_slots(l), v = none.v_slots(l), k_attended = attended.k_slots(l),
                 v_attended = attended.v_slots(l);
    for (std::int64_t i = 0; i < k.numel(); ++i) {
      const bool written = i < n * row_floats;
      ASSERT_EQ(std::isfinite(k.get(i)), written) << "layer " << l << " K element " << i;
      ASSERT_EQ(std::isfinite(v.get(i)), written) << "layer " << l << " V element " << i;
      if (l == 0 && written) {
        ASSERT_EQ(k.get(i), k_attended.get(i)) << "layer 0 K element " << i;
        ASSERT_EQ(v.get(i), v_attended.get(i)) << "layer 0 V element " << i;
      }
    }
  }
}

// What the CUDA model uploads (its check against the device's free memory, before the first
// upload): every parameter once in bf16 when the weights come from the host, the embeddings
// once with tied ones. (Weights already on the device count only their stacked q/k/v and
// gate/up; that needs a device, and the GPU fit test uses host weights.)
TEST_P(ModelReference, CudaUploadBytesAreTheModelInBf16) {
  const std::filesystem::path dir = test::model_fixture_dir() / GetParam();
  const ModelConfig config = load_model_config(dir);
  const LlamaWeights weights = load_weights(config, Checkpoint(dir));
  EXPECT_EQ(llama_cuda_upload_bytes(config, weights), 2 * config.parameter_count());
  LlamaWeights no_layers = weights;
  no_layers.layers.clear();
  const std::int64_t embeddings = config.vocab_size * config.hidden_size * (config.tie_word_embeddings ? 1 : 2);
  EXPECT_EQ(llama_cuda_upload_bytes(config, no_layers), 2 * (embeddings + config.hidden_size));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelReference, ::testing::Values("tiny-llama", "tiny-qwen2", "tiny-llama31", "tiny-llama-d64",
                                                                   "tiny-llama32", "tiny-mistral03", "tiny-qwen3",
                                                                   "tiny-phi3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace hydragen
