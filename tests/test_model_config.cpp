// config.json parsing for every supported family, the presets, and the errors for what is
// not supported.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include <filesystem>
#include <string>

#include "hydragen/error.h"
#include "model/model_config.h"
#include "model/presets.h"
#include "test_model_fixtures.h"

namespace hydragen {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using nlohmann::json;

json llama2_7b() {
  return json::parse(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
    "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_scaling": null,
    "rope_theta": 10000.0, "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1,
    "eos_token_id": 2})");
}

std::string error_of(const json& config) {
  try {
    parse_model_config(config, "test-config");
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(ModelConfig, Llama2) {
  const ModelConfig c = parse_model_config(llama2_7b(), "llama2");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_kv_heads, 32);
  EXPECT_EQ(c.rope.scaling, RopeScaling::none);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.parameter_count(), 6738415616);  // Llama-2-7b
}

TEST(ModelConfig, Llama31RopeScaling) {
  json config = llama2_7b();
  config["num_key_value_heads"] = 8;
  config["rope_theta"] = 500000.0;
  config["eos_token_id"] = json::array({128001, 128008, 128009});
  config["rope_scaling"] = {{"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                            {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}};
  const ModelConfig c = parse_model_config(config, "llama3.1");
  EXPECT_EQ(c.rope.scaling, RopeScaling::llama3);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.num_heads / c.num_kv_heads, 4);
}

TEST(ModelConfig, LinearRopeScalingWithLegacyTypeKey) {
  json config = llama2_7b();
  config["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  const ModelConfig c = parse_model_config(config, "linear");
  EXPECT_EQ(c.rope.scaling, RopeScaling::linear);
  EXPECT_EQ(c.rope.factor, 4.0);
}

TEST(ModelConfig, MistralWithoutBindingSlidingWindow) {
  json config = llama2_7b();
  config["architectures"] = {"MistralForCausalLM"};
  config["num_key_value_heads"] = 8;
  config["max_position_embeddings"] = 32768;
  config["sliding_window"] = nullptr;
  EXPECT_EQ(parse_model_config(config, "mistral").architecture, "MistralForCausalLM");
  config["sliding_window"] = 32768;
  EXPECT_NO_THROW(parse_model_config(config, "mistral"));
  config["sliding_window"] = 4096;
  EXPECT_THAT(error_of(config), HasSubstr("sliding_window 4096"));
}

TEST(ModelConfig, Qwen2HasQkvBias) {
  json config = llama2_7b();
  config["architectures"] = {"Qwen2ForCausalLM"};
  config["use_sliding_window"] = false;
  config["sliding_window"] = 1024;  // ignored while use_sliding_window is false
  const ModelConfig c = parse_model_config(config, "qwen2");
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  config["use_sliding_window"] = true;
  EXPECT_THAT(error_of(config), HasSubstr("sliding_window"));
}

// Qwen3-8B's config.json: head_dim 128 given explicitly, q/k RMSNorm, no biases, 8.19B parameters.
TEST(ModelConfig, Qwen3HasQkNorm) {
  json config = llama2_7b();
  config["architectures"] = {"Qwen3ForCausalLM"};
  config["hidden_size"] = 4096, config["intermediate_size"] = 12288, config["num_hidden_layers"] = 36;
  config["num_attention_heads"] = 32, config["num_key_value_heads"] = 8, config["head_dim"] = 128;
  config["vocab_size"] = 151936, config["max_position_embeddings"] = 40960, config["rope_theta"] = 1000000.0;
  config["use_sliding_window"] = false, config["sliding_window"] = nullptr, config["attention_bias"] = false;
  const ModelConfig c = parse_model_config(config, "qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.fused_projections);
  EXPECT_EQ(c.parameter_count(), 8190735360);  // Qwen3-8B
  config.erase("architectures");
  config["model_type"] = "qwen3";
  EXPECT_TRUE(parse_model_config(config, "qwen3").qk_norm);
  config["use_sliding_window"] = true, config["sliding_window"] = 4096;
  EXPECT_THAT(error_of(config), HasSubstr("sliding_window 4096"));
}

// Phi-3-mini-4k's shape (its own config has sliding_window 2047, which is refused).
TEST(ModelConfig, Phi3HasFusedProjections) {
  json config = llama2_7b();
  config["architectures"] = {"Phi3ForCausalLM"};
  config["hidden_size"] = 3072, config["intermediate_size"] = 8192, config["vocab_size"] = 32064;
  config["original_max_position_embeddings"] = 4096, config["pad_token_id"] = 32000;
  const ModelConfig c = parse_model_config(config, "phi3");
  EXPECT_TRUE(c.fused_projections);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 96);
  EXPECT_EQ(c.parameter_count(), 3821079552);  // Phi-3-mini
  config["sliding_window"] = 2047;
  EXPECT_THAT(error_of(config), HasSubstr("sliding_window 2047"));
  config["sliding_window"] = nullptr;
  config["rope_scaling"] = {{"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  EXPECT_THAT(error_of(config), AllOf(HasSubstr("\"longrope\""), HasSubstr("supported: default, linear, llama3")));
  config["rope_scaling"] = nullptr;
  config["partial_rotary_factor"] = 0.75;
  EXPECT_THAT(error_of(config), HasSubstr("partial_rotary_factor 0.75"));
  config["partial_rotary_factor"] = 1.0;
  config["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
  EXPECT_THAT(error_of(config), HasSubstr("partial_rotary_factor 0.5"));
}

TEST(ModelConfig, MqaAndExplicitHeadDim) {
  json config = llama2_7b();
  config["num_key_value_heads"] = 1;
  config["head_dim"] = 256;
  const ModelConfig c = parse_model_config(config, "mqa");
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.q_size(), 32 * 256);
  EXPECT_EQ(c.kv_size(), 256);
}

TEST(ModelConfig, FixtureConfigsInBothLayoutsAgree) {
  for (const char* variant : {"tiny-llama", "tiny-qwen2", "tiny-llama31", "tiny-llama32", "tiny-mistral03",
                              "tiny-qwen3", "tiny-phi3"}) {
    const auto dir = test::model_fixture_dir() / variant;
    const ModelConfig classic = load_model_config(dir);
    const ModelConfig v5 = load_model_config(dir / "config.transformers5.json");  // rope_parameters
    EXPECT_EQ(classic.rope.theta, v5.rope.theta) << variant;
    EXPECT_EQ(classic.rope.scaling, v5.rope.scaling) << variant;
    EXPECT_EQ(classic.rope.factor, v5.rope.factor) << variant;
    EXPECT_EQ(classic.head_dim, v5.head_dim) << variant;
    EXPECT_EQ(classic.qkv_bias, v5.qkv_bias) << variant;
    EXPECT_EQ(classic.qk_norm, v5.qk_norm) << variant;
    EXPECT_EQ(classic.fused_projections, v5.fused_projections) << variant;
    EXPECT_EQ(classic.tie_word_embeddings, v5.tie_word_embeddings) << variant;
  }
}

TEST(ModelConfig, UnsupportedIsAClearError) {
  json config = llama2_7b();
  config["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_THAT(error_of(config), HasSubstr("\"GPT2LMHeadModel\" is not supported; supported: LlamaForCausalLM"));
  config = llama2_7b();
  config["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  EXPECT_THAT(error_of(config), HasSubstr("\"dynamic\" is not supported; supported: default, linear, llama3"));
  config = llama2_7b();
  config["hidden_act"] = "gelu";
  EXPECT_THAT(error_of(config), HasSubstr("hidden_act \"gelu\""));
  config = llama2_7b();
  config["num_key_value_heads"] = 5;
  EXPECT_THAT(error_of(config), HasSubstr("multiple of num_key_value_heads 5"));
  config = llama2_7b();
  config.erase("hidden_size");
  EXPECT_THAT(error_of(config), HasSubstr("no \"hidden_size\""));
  config = llama2_7b();
  config["mlp_bias"] = true;
  EXPECT_THAT(error_of(config), HasSubstr("mlp_bias"));
  EXPECT_THAT(error_of(json::array()), HasSubstr("JSON object"));
}

// A field of the wrong JSON type or an absurd size is a clear error naming the field, never a
// JSON library exception or an integer overflow further on (sizes multiply into parameter and
// byte counts).
TEST(ModelConfig, WrongTypesAndAbsurdSizesAreClearErrors) {
  json config = llama2_7b();
  config.erase("architectures");
  config["model_type"] = 5;
  EXPECT_THAT(error_of(config), HasSubstr("\"model_type\" must be a string"));
  config = llama2_7b();
  config["hidden_act"] = json::array();
  EXPECT_THAT(error_of(config), HasSubstr("\"hidden_act\" must be a string"));
  config = llama2_7b();
  config["rope_scaling"] = {{"type", 3}, {"factor", 2.0}};
  EXPECT_THAT(error_of(config), HasSubstr("\"type\" must be a string"));
  config = llama2_7b();
  config["architectures"] = {7};
  EXPECT_THAT(error_of(config), HasSubstr("\"architectures\" must hold strings"));
  config = llama2_7b();
  config["hidden_size"] = std::int64_t{1} << 40;
  EXPECT_THAT(error_of(config), HasSubstr("\"hidden_size\" is 1099511627776, more than"));
  config = llama2_7b();
  config["num_hidden_layers"] = std::uint64_t{1} << 63;  // past int64: as read, negative
  EXPECT_THAT(error_of(config), HasSubstr("\"num_hidden_layers\""));
  config = llama2_7b();
  config["max_position_embeddings"] = std::int64_t{1} << 31;
  EXPECT_THAT(error_of(config), HasSubstr("\"max_position_embeddings\" is 2147483648, more than 2147483647"));
}

// RMSNorm's epsilon outside what any model uses (1e308 swamps every activation) is an error.
TEST(ModelConfig, AbsurdRmsNormEpsIsAnError) {
  json config = llama2_7b();
  for (double eps : {1e308, 0.5, 0.0, -1e-5, 1e-300}) {
    config["rms_norm_eps"] = eps;
    EXPECT_THAT(error_of(config), HasSubstr("rms_norm_eps")) << eps;
  }
  config["rms_norm_eps"] = 1e-6;
  EXPECT_EQ(error_of(config), "no error");
}

// config.json goes through the bounded JSON reader: deep nesting, invalid UTF-8, a FIFO and
// a directory are each refused naming the file, never a crash or a hang.
TEST(ModelConfig, HostileConfigFilesAreRefusedByName) {
  test::ScratchDir dir("config");
  const auto file = dir.path() / "config.json";
  auto error_loading = [&] {
    try {
      load_model_config(dir.path());
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  std::string text = llama2_7b().dump();
  std::ofstream(file) << text.substr(0, text.size() - 1) << ", \"x\": " << std::string(100000, '[')
                      << std::string(100000, ']') << "}";
  EXPECT_THAT(error_loading(), AllOf(HasSubstr("config.json"), HasSubstr("nested deeper than 64 levels")));
  std::ofstream(file) << "{\"\xe2\x80\x9chidden_size\xe2\x80\x9d\": 1, \"a\": \"\xff\"}";
  EXPECT_THAT(error_loading(), AllOf(HasSubstr("config.json"), HasSubstr("invalid UTF-8 at byte 31")));
  std::filesystem::remove(file);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  EXPECT_THAT(error_loading(), HasSubstr("config.json: is a FIFO (named pipe), not a regular file"));
  std::filesystem::remove(file);
  std::filesystem::create_directory(file);
  EXPECT_THAT(error_loading(), HasSubstr("is a directory, not a regular file"));
}

TEST(ModelPresets, AllLoadWithTheirRealSizes) {
  const std::vector<std::string> expected{"codellama-13b", "codellama-34b", "codellama-7b",
                                          "llama-3-8b",    "tiny",          "yi-6b-200k"};
  EXPECT_EQ(preset_names(), expected);
  // Parameter counts of the published checkpoints, in billions.
  const std::pair<const char*, double> sizes[] = {{"codellama-7b", 6.74}, {"codellama-13b", 13.02},
                                                  {"codellama-34b", 33.74}, {"llama-3-8b", 8.03},
                                                  {"yi-6b-200k", 6.06}};
  for (const auto& [name, billions] : sizes) {
    const ModelConfig c = load_preset(name);
    EXPECT_NEAR(static_cast<double>(c.parameter_count()) / 1e9, billions, 0.01) << name;
  }
  EXPECT_EQ(load_preset("codellama-7b").rope.theta, 1e6);
  EXPECT_EQ(load_preset("yi-6b-200k").max_position_embeddings, 200000);
  EXPECT_LT(load_preset("tiny").parameter_count() * 4, 16 << 20);  // a few MB
}

// A binary copied away from its source tree finds presets/ beside it or a level or two up
// (a bundle's build/ next to presets/), and share/hydragen/presets of an install prefix; the
// source tree comes last.
TEST(ModelPresets, CandidatesNextToTheExecutableComeFirst) {
  const std::filesystem::path exe = "/opt/x/build/bin/hydragen";
  const std::vector<std::filesystem::path> got = preset_dir_candidates(exe);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0], std::filesystem::path("/opt/x/build/bin/presets"));
  EXPECT_EQ(got[1], std::filesystem::path("/opt/x/build/presets"));
  EXPECT_EQ(got[2], std::filesystem::path("/opt/x/presets"));
  EXPECT_EQ(got[3], std::filesystem::path("/opt/x/build/share/hydragen/presets"));
  EXPECT_TRUE(std::filesystem::is_regular_file(got[4] / "tiny.json")) << got[4];  // the source tree's
  // This test binary (build/tests/hydragen_tests) finds the tree's presets either way.
  EXPECT_TRUE(std::filesystem::is_regular_file(preset_dir() / "tiny.json")) << preset_dir();
}

TEST(ModelPresets, UnknownNameListsTheKnownOnes) {
  try {
    load_preset("llama-99b");
    FAIL() << "no error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("codellama-13b"));
    EXPECT_THAT(error.what(), HasSubstr("\"llama-99b\""));
  }
}

}  // namespace
}  // namespace hydragen
