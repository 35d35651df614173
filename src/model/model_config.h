// ModelConfig: the shape and options of a Llama-family decoder, read from a Hugging Face
// config.json. Supported: LlamaForCausalLM (Llama 2/3/3.1/3.2, CodeLlama, Yi),
// MistralForCausalLM without a sliding window, Qwen2ForCausalLM (Qwen2/2.5: q/k/v bias),
// Qwen3ForCausalLM (RMSNorm on each q and k head), Phi3ForCausalLM (fused qkv and gate/up
// projections). Anything else is an Error that lists what is supported, never a silent misread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace hydragen {

// How RoPE's inverse frequencies are adjusted for long contexts.
enum class RopeScaling : std::uint8_t {
  none,    // inv_freq[i] = theta^(-2i/d)
  linear,  // positions divided by factor (CodeLlama-style position interpolation)
  llama3,  // Llama 3.1: low frequencies / factor, high kept, a smooth ramp between
};
const char* rope_scaling_name(RopeScaling scaling);

struct RopeConfig {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::none;
  double factor = 1.0;
  // llama3 only
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2, or Llama's attention_bias
  bool o_bias = false;    // Llama's attention_bias
  bool qk_norm = false;   // Qwen3: RMSNorm ([head_dim] weights) over each q and k head before RoPE
  bool fused_projections = false;  // Phi-3: qkv_proj [q; k; v rows] and gate_up_proj [gate; up rows]

  std::int64_t q_size() const { return num_heads * head_dim; }
  std::int64_t kv_size() const { return num_kv_heads * head_dim; }
  // Total parameters (embedding and lm_head counted once each when untied).
  std::int64_t parameter_count() const;
};

// Parses a config.json object; `source` names it in errors (a path or "preset tiny").
ModelConfig parse_model_config(const nlohmann::json& config, const std::string& source);
// Reads and parses a config.json file, or the config.json inside a directory.
ModelConfig load_model_config(const std::filesystem::path& path);

}  // namespace hydragen
