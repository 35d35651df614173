// config.json -> ModelConfig. Both the classic layout (rope_theta + rope_scaling, as on the
// Hub) and transformers 5's rope_parameters are read.
#include "model/model_config.h"

#include <limits>

#include "core/json_reader.h"
#include "hydragen/error.h"

namespace hydragen {

namespace {

using nlohmann::json;

constexpr const char* kSupportedArchitectures =
    "LlamaForCausalLM (Llama 2/3/3.1/3.2, CodeLlama, Yi), MistralForCausalLM (no sliding window), "
    "Qwen2ForCausalLM (Qwen2, Qwen2.5), Qwen3ForCausalLM (dense), Phi3ForCausalLM (Phi-3 4k, no sliding window)";
constexpr const char* kSupportedRope = "default, linear, llama3";

// Largest sizes accepted: far past every released Llama-family model (Llama 3.1 405B: hidden
// 16384, intermediate 53248, 126 layers, 128 heads, vocabulary 128256), small enough that the
// products the engine forms (parameter and byte counts) stay inside int64, and positions fit
// the int32 the kernels use.
constexpr std::int64_t kMaxVocab = std::int64_t{1} << 24;
constexpr std::int64_t kMaxHidden = std::int64_t{1} << 18;
constexpr std::int64_t kMaxIntermediate = std::int64_t{1} << 20;
constexpr std::int64_t kMaxLayersOrHeads = std::int64_t{1} << 12;
constexpr std::int64_t kMaxPositions = 2147483647;
// RMSNorm's epsilon: past every released model (1e-6 .. 1e-5) on both sides, inside fp32.
constexpr double kMinRmsNormEps = 1e-12, kMaxRmsNormEps = 1e-2;
// A config.json is a few KB; anything near this is not one.
constexpr std::uint64_t kMaxConfigBytes = std::uint64_t{16} << 20;

std::int64_t get_int(const json& config, const char* key, const std::string& source,
                     std::int64_t largest = std::numeric_limits<std::int64_t>::max()) {
  HG_CHECK(config.contains(key), source, ": config has no \"", key, "\"");
  const json& value = config.at(key);
  HG_CHECK(value.is_number_integer(), source, ": \"", key, "\" must be an integer, got ", json_excerpt(value));
  const std::int64_t result = value.get<std::int64_t>();
  HG_CHECK(result > 0, source, ": \"", key, "\" must be positive, got ", json_excerpt(value));
  HG_CHECK(result <= largest, source, ": \"", key, "\" is ", result, ", more than ", largest,
           " (the largest this engine accepts)");
  return result;
}

std::string get_string(const json& config, const char* key, const std::string& fallback, const std::string& source) {
  if (!config.contains(key) || config.at(key).is_null()) return fallback;
  HG_CHECK(config.at(key).is_string(), source, ": \"", key, "\" must be a string, got ", json_excerpt(config.at(key)));
  return config.at(key).get<std::string>();
}

double get_number(const json& config, const char* key, double fallback, const std::string& source) {
  if (!config.contains(key) || config.at(key).is_null()) return fallback;
  const json& value = config.at(key);
  HG_CHECK(value.is_number(), source, ": \"", key, "\" must be a number, got ", json_excerpt(value));
  return value.get<double>();
}

bool get_bool(const json& config, const char* key, bool fallback, const std::string& source) {
  if (!config.contains(key) || config.at(key).is_null()) return fallback;
  HG_CHECK(config.at(key).is_boolean(), source, ": \"", key, "\" must be true or false, got ",
           json_excerpt(config.at(key)));
  return config.at(key).get<bool>();
}

std::string architecture_of(const json& config, const std::string& source) {
  if (config.contains("architectures") && config.at("architectures").is_array() &&
      !config.at("architectures").empty()) {
    const json& first = config.at("architectures")[0];
    HG_CHECK(first.is_string(), source, ": \"architectures\" must hold strings");
    return first.get<std::string>();
  }
  const std::string model_type = get_string(config, "model_type", "", source);
  if (model_type == "llama") return "LlamaForCausalLM";
  if (model_type == "mistral") return "MistralForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  if (model_type == "qwen3") return "Qwen3ForCausalLM";
  if (model_type == "phi3") return "Phi3ForCausalLM";
  fail(source, ": config has no \"architectures\" and model_type \"", model_type, "\" is not supported; supported: ",
       kSupportedArchitectures);
}

// rope_parameters (transformers 5) or rope_theta + rope_scaling (the Hub's configs).
RopeConfig parse_rope(const json& config, const std::string& source) {
  RopeConfig rope;
  const json* scaling = nullptr;
  if (config.contains("rope_parameters") && config.at("rope_parameters").is_object()) {
    scaling = &config.at("rope_parameters");
    rope.theta = get_number(*scaling, "rope_theta", get_number(config, "rope_theta", 10000.0, source), source);
  } else {
    rope.theta = get_number(config, "rope_theta", 10000.0, source);
    if (config.contains("rope_scaling") && !config.at("rope_scaling").is_null()) {
      scaling = &config.at("rope_scaling");
      HG_CHECK(scaling->is_object(), source, ": \"rope_scaling\" must be an object or null");
    }
  }
  HG_CHECK(rope.theta > 0, source, ": rope_theta must be positive, got ", rope.theta);
  if (scaling == nullptr) return rope;
  const std::string type = get_string(*scaling, "rope_type", get_string(*scaling, "type", "default", source), source);
  if (type == "default") return rope;
  HG_CHECK(type != "longrope" && type != "su", source, ": rope scaling type \"", type,
           "\" (the long-context variant of Phi-3, 128k) is not supported; supported: ", kSupportedRope,
           " (the 4k Phi-3 models have rope_scaling null)");
  rope.factor = get_number(*scaling, "factor", 0.0, source);
  HG_CHECK(rope.factor > 0, source, ": rope scaling \"", type, "\" needs a positive \"factor\"");
  if (type == "linear") {
    rope.scaling = RopeScaling::linear;
  } else if (type == "llama3") {
    rope.scaling = RopeScaling::llama3;
    rope.low_freq_factor = get_number(*scaling, "low_freq_factor", 1.0, source);
    rope.high_freq_factor = get_number(*scaling, "high_freq_factor", 4.0, source);
    HG_CHECK(rope.high_freq_factor > rope.low_freq_factor, source,
             ": llama3 rope scaling needs high_freq_factor > low_freq_factor");
    rope.original_max_position_embeddings = get_int(*scaling, "original_max_position_embeddings", source, kMaxPositions);
  } else {
    fail(source, ": rope scaling type \"", type, "\" is not supported; supported: ", kSupportedRope);
  }
  return rope;
}

// Sliding-window attention is not implemented: a window that never binds is accepted.
void check_no_sliding_window(const json& config, const ModelConfig& model, const std::string& source) {
  const bool qwen = model.architecture == "Qwen2ForCausalLM" || model.architecture == "Qwen3ForCausalLM";
  if (qwen && !get_bool(config, "use_sliding_window", false, source)) return;
  if (!config.contains("sliding_window") || config.at("sliding_window").is_null()) return;
  const std::int64_t window = get_int(config, "sliding_window", source);
  HG_CHECK(window >= model.max_position_embeddings, source, ": sliding_window ", window,
           " < max_position_embeddings ", model.max_position_embeddings,
           " is not supported (sliding-window attention is not implemented); supported: sliding_window null or >= "
           "max_position_embeddings");
}

}  // namespace

const char* rope_scaling_name(RopeScaling scaling) {
  switch (scaling) {
    case RopeScaling::none: return "default";
    case RopeScaling::linear: return "linear";
    case RopeScaling::llama3: return "llama3";
  }
  return "?";
}

std::int64_t ModelConfig::parameter_count() const {
  const std::int64_t attention = hidden_size * (q_size() + 2 * kv_size()) + q_size() * hidden_size +
                                 (qkv_bias ? q_size() + 2 * kv_size() : 0) + (o_bias ? hidden_size : 0);
  const std::int64_t mlp = 3 * hidden_size * intermediate_size;
  const std::int64_t layer = attention + mlp + 2 * hidden_size + (qk_norm ? 2 * head_dim : 0);
  const std::int64_t embeddings = vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2);
  return num_layers * layer + embeddings + hidden_size;
}

ModelConfig parse_model_config(const json& config, const std::string& source) {
  HG_CHECK(config.is_object(), source, ": config must be a JSON object");
  ModelConfig model;
  model.architecture = architecture_of(config, source);
  const bool llama = model.architecture == "LlamaForCausalLM";
  const bool mistral = model.architecture == "MistralForCausalLM";
  const bool qwen2 = model.architecture == "Qwen2ForCausalLM";
  const bool qwen3 = model.architecture == "Qwen3ForCausalLM";
  const bool phi3 = model.architecture == "Phi3ForCausalLM";
  HG_CHECK(llama || mistral || qwen2 || qwen3 || phi3, source, ": architecture \"", model.architecture,
           "\" is not supported; supported: ", kSupportedArchitectures);

  model.vocab_size = get_int(config, "vocab_size", source, kMaxVocab);
  model.hidden_size = get_int(config, "hidden_size", source, kMaxHidden);
  model.intermediate_size = get_int(config, "intermediate_size", source, kMaxIntermediate);
  model.num_layers = get_int(config, "num_hidden_layers", source, kMaxLayersOrHeads);
  model.num_heads = get_int(config, "num_attention_heads", source, kMaxLayersOrHeads);
  model.num_kv_heads = config.contains("num_key_value_heads") && !config.at("num_key_value_heads").is_null()
                           ? get_int(config, "num_key_value_heads", source, kMaxLayersOrHeads)
                           : model.num_heads;
  HG_CHECK(model.num_heads % model.num_kv_heads == 0, source, ": num_attention_heads ", model.num_heads,
           " must be a multiple of num_key_value_heads ", model.num_kv_heads);
  if (config.contains("head_dim") && !config.at("head_dim").is_null()) {
    model.head_dim = get_int(config, "head_dim", source, kMaxLayersOrHeads);
  } else {
    HG_CHECK(model.hidden_size % model.num_heads == 0, source, ": hidden_size ", model.hidden_size,
             " is not a multiple of num_attention_heads ", model.num_heads, " and there is no head_dim");
    model.head_dim = model.hidden_size / model.num_heads;
  }
  HG_CHECK(model.head_dim % 2 == 0, source, ": head_dim must be even for RoPE, got ", model.head_dim);
  model.max_position_embeddings = get_int(config, "max_position_embeddings", source, kMaxPositions);
  model.rms_norm_eps = get_number(config, "rms_norm_eps", 1e-6, source);
  HG_CHECK(model.rms_norm_eps >= kMinRmsNormEps && model.rms_norm_eps <= kMaxRmsNormEps, source, ": rms_norm_eps ",
           model.rms_norm_eps, " is outside [", kMinRmsNormEps, ", ", kMaxRmsNormEps,
           "] (released models use 1e-6 to 1e-5; a larger one would swamp the activations it normalises)");
  model.rope = parse_rope(config, source);
  model.tie_word_embeddings = get_bool(config, "tie_word_embeddings", false, source);

  const std::string act = get_string(config, "hidden_act", "silu", source);
  HG_CHECK(act == "silu", source, ": hidden_act \"", act, "\" is not supported; supported: silu");
  HG_CHECK(!get_bool(config, "mlp_bias", false, source), source, ": mlp_bias=true is not supported");
  const bool attention_bias = get_bool(config, "attention_bias", false, source);
  HG_CHECK(!attention_bias || llama || qwen3, source,
           ": attention_bias is only supported for LlamaForCausalLM and Qwen3ForCausalLM");
  model.qkv_bias = qwen2 || attention_bias;
  model.o_bias = attention_bias;
  model.qk_norm = qwen3;
  model.fused_projections = phi3;
  // Phi-4-mini rotates only part of each head; Phi-3 rotates all of it.
  double rotary = get_number(config, "partial_rotary_factor", 1.0, source);
  if (config.contains("rope_parameters") && config.at("rope_parameters").is_object())
    rotary = get_number(config.at("rope_parameters"), "partial_rotary_factor", rotary, source);
  HG_CHECK(rotary == 1.0, source, ": partial_rotary_factor ", rotary,
           " is not supported (RoPE over part of each head); supported: 1.0");
  check_no_sliding_window(config, model, source);
  return model;
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  const std::filesystem::path file = std::filesystem::is_directory(path) ? path / "config.json" : path;
  HG_CHECK(std::filesystem::exists(file), file.string(), ": cannot open the model config: no such file");
  return parse_model_config(read_json_file(file, {kMaxConfigBytes}), file.string());
}

}  // namespace hydragen
