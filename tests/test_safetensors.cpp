// The safetensors reader and weight loading: valid files (all three float dtypes, sharded
// checkpoints) and corrupt ones, each a hydragen::Error naming the file and the tensor.
#include <gtest/gtest.h>
#include <gmock/gmock.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>

#include <filesystem>
#include <string>

#include "hydragen/error.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "test_model_fixtures.h"

namespace hydragen {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using test::f32_tensor;
using test::RawTensor;

// The message of the Error opening `bytes` as a safetensors file throws ("no error" if none).
std::string open_error(const std::vector<std::uint8_t>& bytes) {
  test::ScratchDir dir("st");
  test::write_file(dir.path() / "bad.safetensors", bytes);
  try {
    SafetensorsFile file(dir.path() / "bad.safetensors");
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(Safetensors, ReadsF32F16Bf16AsF32) {
  test::ScratchDir dir("st");
  RawTensor half{"h", "F16", {2}, {0x00, 0x3c, 0x00, 0xc0}, {}};   // 1.0, -2.0
  RawTensor brain{"b", "BF16", {2}, {0x80, 0x3f, 0x40, 0x40}, {}};  // 1.0, 3.0
  test::write_file(dir.path() / "model.safetensors", test::safetensors_bytes({f32_tensor("a", {2, 3}), half, brain}));
  SafetensorsFile file(dir.path() / "model.safetensors");
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
  const Tensor a = file.read(*file.header().find("a"), DType::f32);
  EXPECT_EQ(a.shape(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(a.get(5), 1.25);
  const Tensor h = file.read(*file.header().find("h"), DType::f32);
  EXPECT_EQ(h.get(0), 1.0);
  EXPECT_EQ(h.get(1), -2.0);
  const Tensor b = file.read(*file.header().find("b"), DType::f32);
  EXPECT_EQ(b.get(1), 3.0);
  EXPECT_EQ(file.header().find("missing"), nullptr);
}

TEST(Safetensors, CorruptFilesAreClearErrors) {
  const std::vector<std::uint8_t> valid = test::safetensors_bytes({f32_tensor("w", {4})});
  EXPECT_THAT(open_error({1, 2, 3}), AllOf(HasSubstr("bad.safetensors"), HasSubstr("too short")));
  EXPECT_THAT(open_error(std::vector<std::uint8_t>(valid.begin(), valid.end() - 3)),
              AllOf(HasSubstr("bad.safetensors"), HasSubstr("\"w\""), HasSubstr("outside the data area")));
  std::vector<std::uint8_t> long_header = valid;
  long_header[4] = 1;  // header length + 2^32
  EXPECT_THAT(open_error(long_header), HasSubstr("runs past the end of the file"));
  std::vector<std::uint8_t> not_json = valid;
  not_json[8] = '[';
  EXPECT_THAT(open_error(not_json), HasSubstr("not valid JSON"));

  RawTensor outside = f32_tensor("w", {4});
  outside.offsets = {1000, 1016};
  EXPECT_THAT(open_error(test::safetensors_bytes({outside})),
              AllOf(HasSubstr("tensor \"w\""), HasSubstr("[1000, 1016] lie outside the data area of 16 bytes")));
  RawTensor first = f32_tensor("first", {4}), second = f32_tensor("second", {4});
  second.offsets = {8, 24};
  EXPECT_THAT(open_error(test::safetensors_bytes({first, second})),
              AllOf(HasSubstr("\"first\""), HasSubstr("\"second\""), HasSubstr("overlap")));
  RawTensor wrong_size = f32_tensor("w", {4});
  wrong_size.shape = {5};
  EXPECT_THAT(open_error(test::safetensors_bytes({wrong_size})), HasSubstr("needs 20 bytes"));
  RawTensor unknown = f32_tensor("w", {4});
  unknown.dtype = "Q4_K";
  EXPECT_THAT(open_error(test::safetensors_bytes({unknown})), AllOf(HasSubstr("\"w\""), HasSubstr("unknown dtype")));
  RawTensor negative = f32_tensor("w", {4});
  negative.shape = {-4};
  EXPECT_THAT(open_error(test::safetensors_bytes({negative})), HasSubstr("non-negative"));
}

TEST(Safetensors, HeaderLengthLimit) {
  test::ScratchDir dir("st");
  const auto path = dir.path() / "huge.safetensors";
  std::vector<std::uint8_t> bytes(8, 0);
  const std::uint64_t length = kMaxSafetensorsHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::uint8_t>(length >> (8 * i));
  test::write_file(path, bytes);
  std::filesystem::resize_file(path, 8 + length);  // sparse: no disk used
  EXPECT_THROW(
      {
        try {
          SafetensorsFile file(path);
        } catch (const Error& error) {
          EXPECT_THAT(error.what(), HasSubstr("exceeds the limit"));
          throw;
        }
      },
      Error);
}

TEST(Safetensors, ShardedCheckpoint) {
  test::ScratchDir dir("st");
  test::write_file(dir.path() / "a.safetensors", test::safetensors_bytes({f32_tensor("x", {2})}));
  test::write_file(dir.path() / "b.safetensors", test::safetensors_bytes({f32_tensor("y", {3}, 7.0f)}));
  std::ofstream(dir.path() / "model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors"}})";
  const Checkpoint checkpoint(dir.path());
  EXPECT_EQ(checkpoint.tensor_names(), (std::vector<std::string>{"x", "y"}));
  const Checkpoint::Found y = checkpoint.find("y");
  ASSERT_NE(y.entry, nullptr);
  EXPECT_EQ(y.file->path().filename(), "b.safetensors");
  EXPECT_EQ(y.file->read(*y.entry, DType::f32).get(0), 7.0);
  EXPECT_EQ(checkpoint.find("z").entry, nullptr);

  std::ofstream(dir.path() / "model.safetensors.index.json") << R"({"weight_map": {"z": "a.safetensors"}})";
  EXPECT_THROW(Checkpoint{dir.path()}, Error);
  std::ofstream(dir.path() / "model.safetensors.index.json") << R"({"weight_map": {"x": "../a.safetensors"}})";
  EXPECT_THROW(Checkpoint{dir.path()}, Error);
  std::ofstream(dir.path() / "model.safetensors.index.json") << R"({"weight_map": {"x": "gone.safetensors"}})";
  EXPECT_THROW(Checkpoint{dir.path()}, Error);
}

// A copy of the tiny-llama fixture with its tensors edited by `edit`.
std::string weights_error(const std::function<void(std::vector<RawTensor>&)>& edit, const ModelConfig& config) {
  const auto fixture = test::model_fixture_dir() / "tiny-llama";
  SafetensorsFile source(fixture / "model.safetensors");
  std::vector<RawTensor> tensors;
  for (const SafetensorsEntry& e : source.header().tensors) {
    const auto bytes = source.bytes(e);
    tensors.push_back(RawTensor{e.name, safetensors_dtype_name(e.dtype), e.shape,
                                std::vector<std::uint8_t>(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                                          reinterpret_cast<const std::uint8_t*>(bytes.data()) + bytes.size()),
                                {}});
  }
  edit(tensors);
  test::ScratchDir dir("weights");
  test::write_file(dir.path() / "model.safetensors", test::safetensors_bytes(tensors));
  try {
    load_weights(config, Checkpoint(dir.path()));
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(ModelWeights, LoadErrorsNameTheTensor) {
  const ModelConfig config = load_model_config(test::model_fixture_dir() / "tiny-llama");
  EXPECT_EQ(weights_error([](auto&) {}, config), "no error");
  EXPECT_THAT(weights_error([](auto& t) { std::erase_if(t, [](auto& x) { return x.name == "model.norm.weight"; }); },
                            config),
              AllOf(HasSubstr("\"model.norm.weight\" is missing")));
  ModelConfig wider = config;
  wider.intermediate_size = 256;
  EXPECT_THAT(weights_error([](auto&) {}, wider),
              AllOf(HasSubstr("model.safetensors"), HasSubstr("\"model.layers.0.mlp.gate_proj.weight\" has shape [128, 64]"),
                    HasSubstr("expects [256, 64]")));
  EXPECT_THAT(weights_error(
                  [](auto& t) {
                    for (auto& x : t) if (x.name == "model.norm.weight") x.dtype = "I32";
                  },
                  config),
              AllOf(HasSubstr("\"model.norm.weight\" has dtype I32"), HasSubstr("expected F32, F16 or BF16")));
}

// A NaN or an infinity in a weight is refused at load naming the tensor and the element: it
// would only come out as finite garbage or a NaN far from its cause.
TEST(ModelWeights, NonFiniteWeightsAreRefusedNamingTheTensor) {
  const ModelConfig config = load_model_config(test::model_fixture_dir() / "tiny-llama");
  auto poison = [](const char* name, std::size_t element, float value) {
    return [=](std::vector<RawTensor>& tensors) {
      for (RawTensor& t : tensors)
        if (t.name == name) std::memcpy(t.bytes.data() + 4 * element, &value, 4);
    };
  };
  EXPECT_THAT(weights_error(poison("model.layers.1.self_attn.k_proj.weight", 77, std::nanf("")), config),
              AllOf(HasSubstr("model.safetensors"), HasSubstr("\"model.layers.1.self_attn.k_proj.weight\" holds nan"),
                    HasSubstr("element 77"), HasSubstr("must be finite")));
  EXPECT_THAT(weights_error(poison("model.norm.weight", 5, -INFINITY), config),
              AllOf(HasSubstr("\"model.norm.weight\" holds -inf at element 5")));
  // bf16 storage: the check reads the stored half words (0x7FC0: a bf16 NaN).
  EXPECT_THAT(weights_error(
                  [](std::vector<RawTensor>& tensors) {
                    for (RawTensor& t : tensors) {
                      if (t.name != "lm_head.weight") continue;
                      std::vector<std::uint8_t> half(t.bytes.size() / 2);
                      for (std::size_t i = 0; i < half.size(); i += 2) half[i] = t.bytes[2 * i + 2], half[i + 1] = t.bytes[2 * i + 3];
                      half[2 * 1000] = 0xC0, half[2 * 1000 + 1] = 0x7F;
                      t.bytes = half, t.dtype = "BF16";
                    }
                  },
                  config),
              HasSubstr("\"lm_head.weight\" holds nan at element 1000"));
}

// Tensors the config does not use mean config.json and the checkpoint disagree (layers past
// num_hidden_layers, biases the architecture has none of, an lm_head beside tied embeddings):
// an error naming the tensors and the config, not a model run with part of it ignored.
TEST(ModelWeights, TensorsTheConfigDoesNotUseAreAnError) {
  const ModelConfig config = load_model_config(test::model_fixture_dir() / "tiny-llama");
  ModelConfig fewer = config;
  fewer.num_layers = 1;
  EXPECT_THAT(weights_error([](auto&) {}, fewer),
              AllOf(HasSubstr("9 tensors of the checkpoint (\"model.layers.1."),
                    HasSubstr("not used by config.json (LlamaForCausalLM with num_hidden_layers 1)")));
  EXPECT_THAT(weights_error([](auto& t) { t.push_back(f32_tensor("model.layers.0.self_attn.q_proj.bias", {64})); },
                            config),
              AllOf(HasSubstr("1 tensor of the checkpoint (\"model.layers.0.self_attn.q_proj.bias\") is not used")));
  ModelConfig tied = config;
  tied.tie_word_embeddings = true;
  EXPECT_THAT(weights_error([](auto&) {}, tied),
              AllOf(HasSubstr("\"lm_head.weight\" differs from \"model.embed_tokens.weight\""),
                    HasSubstr("tie_word_embeddings: true")));
  // An lm_head equal to the embedding agrees with tying; RoPE's inv_freq buffer is derived.
  EXPECT_EQ(weights_error(
                [](std::vector<RawTensor>& t) {
                  std::vector<std::uint8_t> embed;
                  for (const RawTensor& x : t) if (x.name == "model.embed_tokens.weight") embed = x.bytes;
                  for (RawTensor& x : t) if (x.name == "lm_head.weight") x.bytes = embed;
                  t.push_back(f32_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", {8}));
                },
                tied),
            "no error");
}

// A checkpoint file that is a FIFO would block the loader: it is refused by name.
TEST(Safetensors, FifoIsRefusedByName) {
  test::ScratchDir dir("st");
  ASSERT_EQ(::mkfifo((dir.path() / "model.safetensors").c_str(), 0600), 0);
  try {
    Checkpoint checkpoint(dir.path());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.safetensors: is a FIFO (named pipe), not a regular file"));
  }
}

TEST(ModelWeights, RandomWeightsAreDeterministic) {
  const ModelConfig config = load_model_config(test::model_fixture_dir() / "tiny-qwen2");
  const LlamaWeights a = random_weights(config, 7), b = random_weights(config, 7), c = random_weights(config, 8);
  EXPECT_EQ(a.layers[1].wk.get(100), b.layers[1].wk.get(100));
  EXPECT_NE(a.layers[1].wk.get(100), c.layers[1].wk.get(100));
  EXPECT_NE(a.layers[0].wk.get(100), a.layers[1].wk.get(100));
  EXPECT_TRUE(a.layers[0].bq.defined());
  EXPECT_EQ(a.lm_head.raw(), a.embed.raw());  // tied
  EXPECT_EQ(a.final_norm.get(3), 1.0);
  const LlamaWeights half = random_weights(config, 7, DType::bf16);
  EXPECT_EQ(half.layers[1].wk.dtype(), DType::bf16);
  EXPECT_NEAR(half.layers[1].wk.get(100), a.layers[1].wk.get(100), 1e-2 * std::abs(a.layers[1].wk.get(100)));
}

}  // namespace
}  // namespace hydragen
