// The bf16 CUDA forward pass against transformers (issue 4's GPU criterion) on the fixtures
// whose head dim the CUDA attention kernels take (tests/fixtures/model: tiny-llama-d64, and
// the shapes of Llama 3.2, Mistral v0.3 and Phi-3: tiny-llama32, tiny-mistral03, tiny-phi3):
// logits within 2e-2 relative at every prompt position and greedy continuations that agree
// where bf16 can decide them (see the greedy test), in every attention mode, through the paged
// forward (paged_model_util.h). Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "hydragen/attention.h"
#include "hydragen/error.h"
#include "model/llama.h"
#include "model/llama_cuda.h"
#include "model/model_config.h"
#include "model/paged_kv.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "cuda_test_util.h"
#include "paged_model_util.h"
#include "test_model_fixtures.h"

#ifdef HYDRAGEN_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace hydragen {
namespace {

constexpr const char* kFixture = "tiny-llama-d64";
// Every fixture of a head dim the CUDA kernels take (tiny-qwen3's is 32).
constexpr const char* kCudaFixtures[] = {"tiny-llama-d64", "tiny-llama32", "tiny-mistral03", "tiny-phi3"};
constexpr double kMaxRelative = 2e-2;  // bf16 weights and activations against fp32 transformers

std::vector<std::int32_t> ids(const nlohmann::json& list) {
  return list.get<std::vector<std::int32_t>>();
}

// The greedy check means something only if the continuations vary (tied tiny models just
// repeat their last token; make-reference.py picks a seed whose runs do not). Needs no GPU.
// (tiny-llama32's tied runs repeat a few tokens: its greedy check rests on the near-tie rule.)
TEST(CudaModelReference, FixtureGreedyRunsAreVaried) {
  for (const char* fixture : {kFixture, "tiny-mistral03", "tiny-phi3"}) {
    const nlohmann::json record = test::read_json(test::model_fixture_dir() / fixture / "reference.json");
    for (const auto& run : record.at("greedy")) {
      const std::vector<std::int32_t> tokens = ids(run.at("tokens"));
      EXPECT_GE(std::set<std::int32_t>(tokens.begin(), tokens.end()).size(), 12u)
          << fixture << " prompt " << run.at("prompt_index");
    }
  }
}

#ifdef HYDRAGEN_WITH_CUDA
// The fixture's checkpoint on the GPU and transformers' record of it.
struct Fixture {
  explicit Fixture(const char* name = kFixture) : dir(test::model_fixture_dir() / name) {}
  std::filesystem::path dir;
  ModelConfig config = load_model_config(dir);
  LlamaCuda model{config, load_weights(config, Checkpoint(dir))};
  nlohmann::json record = test::read_json(dir / "reference.json");
};
#endif

class CudaFixtureReference : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaFixtureReference, LogitsMatchTransformersInEveryMode) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  const char* const fixture_name = GetParam();
  const Fixture fixture(fixture_name);
  test::CudaStepper stepper(fixture.model);
  const nlohmann::json& record = fixture.record;
  SafetensorsFile logits_file(fixture.dir / "reference_logits.safetensors");
  const auto& prompts = record.at("prompts");
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const auto* entry = logits_file.header().find("logits." + std::to_string(p));
    ASSERT_NE(entry, nullptr);
    const Tensor expected = logits_file.read(*entry, DType::f32);
    for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
      const Tensor actual = test::paged_logits(stepper, mode, ids(prompts[p]));
      ASSERT_EQ(actual.shape(), expected.shape());
      const double error = test::relative_error(actual, expected);
      std::printf("[ numbers  ] %s prompt %zu (%lld tokens) mode %s: relative error %.3e\n", fixture_name, p,
                  static_cast<long long>(expected.size(0)), mode_name(mode), error);
      EXPECT_LT(error, kMaxRelative) << fixture_name << " prompt " << p << " mode " << mode_name(mode);
    }
  }
#endif
}

// Greedy continuations against transformers', in every mode. transformers ran in fp32; this
// forward runs bf16 weights and activations, whose logits differ from it by ~1% of the largest
// (the test above), while the fixture's greedy runs have top-2 margins down to 0.08 (the
// widest make-reference.py found): a position whose margin is below our error is a coin toss
// that kernel rounding order decides (v18's mma decode path flipped prompt 2's first token,
// 168 vs 235, 0.0815 apart in fp32, with attention as exact as before). So, per mode:
//   1. transformers' tokens fed back (one prefill over prompt + 32 tokens): at each position
//      our argmax is transformers' token, or that token is within kTie of our best (a
//      near-tie), at most kMaxTies times in a run;
//   2. our own free-running greedy (decode steps of one token over the pool) fed back the
//      same way: each token is the prefill's argmax at its position, or within kSelfTie of it
//      (the decode and prefill paths agree);
//   3. with no near-tie in 1, the free-running tokens are transformers' exactly.
constexpr float kTie = 0.25f;       // ~2.5% of the largest logit (~10)
constexpr float kSelfTie = 0.05f;   // decode vs prefill kernels and GEMM shapes: rounding order only
constexpr int kMaxTies = 2;

struct ForcedCheck {
  int ties = 0;
  float largest_gap = 0.f;  // our best logit - our logit of the fed token, over the positions
  std::vector<std::string> failures;
};

// Our logits over prompt + tokens, one pass; position i's row predicts tokens[i].
ForcedCheck check_fed_back(test::PagedStepper& stepper, const std::vector<std::int32_t>& prompt,
                           const std::vector<std::int32_t>& tokens, AttentionMode mode, float tie) {
  std::vector<std::int32_t> fed = prompt;
  fed.insert(fed.end(), tokens.begin(), tokens.end() - 1);
  const Tensor logits = test::paged_logits(stepper, mode, fed);
  const std::int64_t vocab = logits.size(1);
  const float* l = logits.data<float>();
  ForcedCheck out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const float* row = l + (static_cast<std::int64_t>(prompt.size()) - 1 + static_cast<std::int64_t>(i)) * vocab;
    std::int64_t best = 0;
    for (std::int64_t v = 1; v < vocab; ++v)
      if (row[v] > row[best]) best = v;
    if (best == tokens[i]) continue;
    const float gap = row[best] - row[tokens[i]];
    out.largest_gap = std::max(out.largest_gap, gap);
    ++out.ties;
    if (gap > tie)
      out.failures.push_back("position " + std::to_string(i) + ": token " + std::to_string(tokens[i]) + " is " +
                             std::to_string(gap) + " below our best " + std::to_string(best));
  }
  return out;
}

TEST_P(CudaFixtureReference, GreedyTokensMatchTransformersInEveryMode) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  const char* const fixture_name = GetParam();
  const Fixture fixture(fixture_name);
  test::CudaStepper stepper(fixture.model);
  const nlohmann::json& record = fixture.record;
  for (const auto& run : record.at("greedy")) {
    const int index = run.at("prompt_index").get<int>();
    const std::vector<std::int32_t> prompt = ids(record.at("prompts")[index]);
    const std::vector<std::int32_t> expected = ids(run.at("tokens"));
    for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
      const std::string what = std::string(fixture_name) + " prompt " + std::to_string(index) + " mode " + mode_name(mode);
      const ForcedCheck reference = check_fed_back(stepper, prompt, expected, mode, kTie);
      const std::vector<std::int32_t> actual =
          test::paged_greedy(stepper, mode, prompt, static_cast<std::int64_t>(expected.size()));
      const ForcedCheck self = check_fed_back(stepper, prompt, actual, mode, kSelfTie);
      std::size_t same = 0;
      while (same < actual.size() && same < expected.size() && actual[same] == expected[same]) ++same;
      std::printf("[ numbers  ] %s: fed back, %zu of %zu of transformers' tokens our argmax (%d near-ties, "
                  "largest gap %.4f; its min margin %.4f); free-running %zu identical; own tokens fed back: %d "
                  "off our argmax (largest gap %.4f)\n",
                  what.c_str(), expected.size() - reference.ties, expected.size(), reference.ties,
                  reference.largest_gap, run.at("min_margin").get<double>(), same, self.ties, self.largest_gap);
      for (const std::string& f : reference.failures) ADD_FAILURE() << what << ", transformers' tokens: " << f;
      EXPECT_LE(reference.ties, kMaxTies) << what;
      for (const std::string& f : self.failures) ADD_FAILURE() << what << ", our greedy tokens: " << f;
      if (reference.ties == 0) EXPECT_EQ(actual, expected) << what;
    }
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaFixtureReference, ::testing::ValuesIn(kCudaFixtures), [](const auto& info) {
  std::string name = info.param;
  for (char& c : name) if (c == '-') c = '_';
  return name;
});

// The CUDA `none` step (attend null: o = q) keeps the projections like its CPU twin: every
// layer's K and V of every row written, within bf16 of the CPU's none step, and the poisoned
// slots past the rows untouched.
TEST(CudaModelReference, NoneModeStepWritesTheKvOfItsCpuTwin) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  const Fixture fixture;
  const ModelConfig& config = fixture.config;
  const Llama cpu_model(config, load_weights(config, Checkpoint(fixture.dir)));
  const StepRows rows = test::prompt_rows(ids(fixture.record.at("prompts")[1]));
  const std::int64_t n = rows.size();
  const std::int64_t pages = n / 16 + 2;  // whole pages past the rows stay poisoned
  PagedKv cpu_kv = test::poisoned_pool(config, pages, 16);
  PagedKv gpu_kv = PagedKv::allocate(config, pages, 16, DType::bf16, Device::cuda);
  for (std::int64_t l = 0; l < cpu_kv.layers(); ++l) {
    const auto i = static_cast<std::size_t>(l);
    gpu_kv.k[i].copy_from(cpu_kv.k[i].to(DType::bf16));
    gpu_kv.v[i].copy_from(cpu_kv.v[i].to(DType::bf16));
  }
  cpu_model.forward_paged(rows, nullptr, cpu_kv, false);

  LlamaCuda::StepBuffers b = fixture.model.new_step_buffers(n);
  auto device_i32 = [](std::vector<std::int32_t> values) {
    return Tensor::wrap(values.data(), {static_cast<std::int64_t>(values.size())}, DType::i32).to(Device::cuda);
  };
  b.tokens.slice(0, 0, n).copy_from(device_i32(rows.tokens));
  b.positions.slice(0, 0, n).copy_from(device_i32(rows.positions));
  b.slots.slice(0, 0, n).copy_from(device_i32(rows.slots));
  fixture.model.forward_rows(
      n, b, [&](std::int64_t l) { return gpu_kv.k_slots(l); }, [&](std::int64_t l) { return gpu_kv.v_slots(l); }, {},
      false, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::int64_t written = n * config.num_kv_heads * config.head_dim;
  for (std::int64_t l = 0; l < cpu_kv.layers(); ++l) {
    for (bool is_k : {true, false}) {
      const Tensor expected = is_k ? cpu_kv.k_slots(l) : cpu_kv.v_slots(l);
      const Tensor actual = (is_k ? gpu_kv.k_slots(l) : gpu_kv.v_slots(l)).to(Device::cpu).to(DType::f32);
      for (std::int64_t e = 0; e < actual.numel(); ++e)
        ASSERT_EQ(std::isfinite(actual.get(e)), e < written) << "layer " << l << (is_k ? " K" : " V") << " element " << e;
      const double error = test::relative_error(actual.reshape({actual.numel()}).slice(0, 0, written),
                                                expected.reshape({expected.numel()}).slice(0, 0, written));
      EXPECT_LT(error, kMaxRelative) << "layer " << l << (is_k ? " K" : " V");
    }
  }
#endif
}

// Weights that cannot fit the device are refused before the first upload, naming both sizes:
// the free memory is taken down (a buffer holding all but half of what the model needs) and
// the model built. One layer of codellama-7b, random bf16 weights on the host (~0.9 GB: far
// above the device's 2 MiB allocation granularity).
TEST(CudaModelReference, WeightsLargerThanTheFreeMemoryAreRefusedByName) {
  SKIP_WITHOUT_GPU();
#ifdef HYDRAGEN_WITH_CUDA
  ModelConfig config = load_preset("codellama-7b");
  config.num_layers = 1;
  const LlamaWeights weights = random_weights(config, 5, DType::bf16, Device::cpu);
  const std::int64_t need = llama_cuda_upload_bytes(config, weights);
  std::size_t free_bytes = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  void* hog = nullptr;
  for (std::int64_t take = static_cast<std::int64_t>(free_bytes) - need / 2; take > 0 && hog == nullptr;
       take -= std::int64_t{2} << 20) {
    if (cudaMalloc(&hog, static_cast<std::size_t>(take)) != cudaSuccess) hog = nullptr, cudaGetLastError();
  }
  ASSERT_NE(hog, nullptr) << "could not take the device's free memory down";
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  if (static_cast<std::int64_t>(free_bytes) < need) {
    try {
      LlamaCuda model(config, weights);
      ADD_FAILURE() << "a model of " << need << " bytes was built with " << free_bytes << " bytes free";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("does not fit this GPU"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(need >> 20) + " MiB on the device"), std::string::npos)
          << e.what();
    }
  } else {
    ADD_FAILURE() << free_bytes << " bytes still free after the buffer; the model needs " << need;
  }
  cudaFree(hog);
  LlamaCuda fits(config, weights);  // and with the memory back, it is built
  EXPECT_EQ(fits.config().num_layers, config.num_layers);
#endif
}

}  // namespace
}  // namespace hydragen
