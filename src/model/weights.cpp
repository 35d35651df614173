#include "model/weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <set>

#include "core/thread_pool.h"
#include "hydragen/error.h"
#include "core/counter_rng.h"
#include "model/safetensors.h"

#ifdef HYDRAGEN_WITH_CUDA
#include "backend/cuda/model_ops.h"
#endif

namespace hydragen {

void for_each_weight(const ModelConfig& config, LlamaWeights& weights, const WeightVisitor& visit) {
  const std::int64_t hidden = config.hidden_size;
  const std::int64_t inter = config.intermediate_size;
  visit("model.embed_tokens.weight", {config.vocab_size, hidden}, weights.embed, WeightInit::matrix);
  weights.layers.resize(static_cast<std::size_t>(config.num_layers));
  for (std::int64_t l = 0; l < config.num_layers; ++l) {
    LayerWeights& layer = weights.layers[static_cast<std::size_t>(l)];
    const std::string prefix = concat("model.layers.", l, ".");
    visit(prefix + "input_layernorm.weight", {hidden}, layer.attn_norm, WeightInit::ones);
    if (config.fused_projections) {
      visit(prefix + "self_attn.qkv_proj.weight", {config.q_size() + 2 * config.kv_size(), hidden}, layer.w_qkv,
            WeightInit::matrix);
    } else {
      visit(prefix + "self_attn.q_proj.weight", {config.q_size(), hidden}, layer.wq, WeightInit::matrix);
      visit(prefix + "self_attn.k_proj.weight", {config.kv_size(), hidden}, layer.wk, WeightInit::matrix);
      visit(prefix + "self_attn.v_proj.weight", {config.kv_size(), hidden}, layer.wv, WeightInit::matrix);
    }
    visit(prefix + "self_attn.o_proj.weight", {hidden, config.q_size()}, layer.wo, WeightInit::matrix);
    if (config.qkv_bias) {
      visit(prefix + "self_attn.q_proj.bias", {config.q_size()}, layer.bq, WeightInit::bias);
      visit(prefix + "self_attn.k_proj.bias", {config.kv_size()}, layer.bk, WeightInit::bias);
      visit(prefix + "self_attn.v_proj.bias", {config.kv_size()}, layer.bv, WeightInit::bias);
    }
    if (config.o_bias) visit(prefix + "self_attn.o_proj.bias", {hidden}, layer.bo, WeightInit::bias);
    if (config.qk_norm) {
      visit(prefix + "self_attn.q_norm.weight", {config.head_dim}, layer.q_norm, WeightInit::ones);
      visit(prefix + "self_attn.k_norm.weight", {config.head_dim}, layer.k_norm, WeightInit::ones);
    }
    visit(prefix + "post_attention_layernorm.weight", {hidden}, layer.mlp_norm, WeightInit::ones);
    if (config.fused_projections) {
      visit(prefix + "mlp.gate_up_proj.weight", {2 * inter, hidden}, layer.w_gate_up, WeightInit::matrix);
    } else {
      visit(prefix + "mlp.gate_proj.weight", {inter, hidden}, layer.w_gate, WeightInit::matrix);
      visit(prefix + "mlp.up_proj.weight", {inter, hidden}, layer.w_up, WeightInit::matrix);
    }
    visit(prefix + "mlp.down_proj.weight", {hidden, inter}, layer.w_down, WeightInit::matrix);
  }
  visit("model.norm.weight", {hidden}, weights.final_norm, WeightInit::ones);
  if (!config.tie_word_embeddings) {
    visit("lm_head.weight", {config.vocab_size, hidden}, weights.lm_head, WeightInit::matrix);
  }
}

void split_fused_weights(const ModelConfig& config, LlamaWeights& weights) {
  if (!config.fused_projections) return;
  const std::int64_t q = config.q_size(), kv = config.kv_size(), inter = config.intermediate_size;
  for (LayerWeights& layer : weights.layers) {
    HG_CHECK(layer.w_qkv.defined() && layer.w_gate_up.defined(),
             "split_fused_weights: a layer has no fused qkv or gate_up weight");
    layer.wq = layer.w_qkv.slice(0, 0, q);
    layer.wk = layer.w_qkv.slice(0, q, q + kv);
    layer.wv = layer.w_qkv.slice(0, q + kv, q + 2 * kv);
    layer.w_gate = layer.w_gate_up.slice(0, 0, inter);
    layer.w_up = layer.w_gate_up.slice(0, inter, 2 * inter);
  }
}

namespace {

void check_compute_dtype(const char* function, DType dtype) {
  HG_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16, function, ": dtype ",
           dtype_name(dtype), " is not a weight dtype, expected f32, f16 or bf16");
}

void tie_embeddings(const ModelConfig& config, LlamaWeights& weights) {
  if (config.tie_word_embeddings) weights.lm_head = weights.embed;
}

// The first element of a CPU f32/f16/bf16 tensor that is NaN or infinite (all exponent bits
// set), or -1.
std::int64_t first_non_finite(const Tensor& t) {
  const std::int64_t n = t.numel();
  const bool wide = t.dtype() == DType::f32;
  const std::uint32_t exponent = wide ? 0x7F800000u : t.dtype() == DType::f16 ? 0x7C00u : 0x7F80u;
  std::atomic<std::int64_t> first{n};
  constexpr std::int64_t kChunk = 1 << 18;
  ThreadPool::global().parallel_for((n + kChunk - 1) / kChunk, [&](std::int64_t chunk) {
    const std::int64_t begin = chunk * kChunk, end = std::min(n, begin + kChunk);
    bool bad = false;
    for (std::int64_t i = begin; i < end; ++i) {
      const std::uint32_t bits = wide ? t.data<std::uint32_t>()[i] : t.data<std::uint16_t>()[i];
      bad |= (bits & exponent) == exponent;
    }
    if (!bad) return;
    for (std::int64_t i = begin; i < end; ++i) {
      const std::uint32_t bits = wide ? t.data<std::uint32_t>()[i] : t.data<std::uint16_t>()[i];
      if ((bits & exponent) != exponent) continue;
      for (std::int64_t seen = first.load(); i < seen && !first.compare_exchange_weak(seen, i);) {}
      return;
    }
  });
  return first.load() == n ? -1 : first.load();
}

// Buffers some converters save beside the weights, recomputed here from the config.
bool is_derived_buffer(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }

// Every tensor of the checkpoint must be one the config uses: extra layers, biases or an lm_head
// beside tied embeddings mean config.json and the checkpoint disagree, and ignoring them would
// run another model than the one saved. A stored lm_head equal to the embedding agrees.
void check_every_tensor_used(const ModelConfig& config, const Checkpoint& checkpoint, const LlamaWeights& weights,
                             const std::set<std::string>& used, DType dtype) {
  std::vector<std::string> unused;
  for (const std::string& name : checkpoint.tensor_names()) {
    if (used.count(name) != 0 || is_derived_buffer(name)) continue;
    if (name == "lm_head.weight" && config.tie_word_embeddings) {
      const Checkpoint::Found found = checkpoint.find(name);
      const Tensor head = found.entry->shape == weights.embed.shape() ? found.file->read(*found.entry, dtype) : Tensor();
      HG_CHECK(head.defined() && std::memcmp(head.raw(), weights.embed.raw(), head.bytes()) == 0,
               found.file->path().string(), ": tensor \"lm_head.weight\" differs from \"model.embed_tokens.weight\", but ",
               "config.json says tie_word_embeddings: true (lm_head is the embedding): the config and the checkpoint ",
               "disagree (set tie_word_embeddings to false to use the stored lm_head)");
      continue;
    }
    unused.push_back(name);
  }
  if (unused.empty()) return;
  std::string listed;
  for (std::size_t i = 0; i < unused.size() && i < 3; ++i) listed += concat(i ? ", \"" : "\"", unused[i], "\"");
  fail(checkpoint.dir().string(), ": ", unused.size(), unused.size() == 1 ? " tensor" : " tensors", " of the checkpoint (",
       listed, unused.size() > 3 ? ", ..." : "", ") ", unused.size() == 1 ? "is" : "are", " not used by config.json (",
       config.architecture, " with num_hidden_layers ", config.num_layers, config.qkv_bias ? ", q/k/v bias" : "",
       config.tie_word_embeddings ? ", tied embeddings" : "", "): the config and the checkpoint disagree");
}

}  // namespace

LlamaWeights load_weights(const ModelConfig& config, const Checkpoint& checkpoint, DType dtype) {
  check_compute_dtype("load_weights", dtype);
  LlamaWeights weights;
  std::set<std::string> used;
  for_each_weight(config, weights, [&](const std::string& name, const std::vector<std::int64_t>& shape, Tensor& slot,
                                       WeightInit) {
    used.insert(name);
    const Checkpoint::Found found = checkpoint.find(name);
    HG_CHECK(found.entry != nullptr, checkpoint.dir().string(), ": tensor \"", name,
             "\" is missing from the checkpoint (", config.architecture, " with ", config.num_layers, " layers",
             config.qkv_bias ? ", q/k/v bias" : "", ")");
    HG_CHECK(found.entry->shape == shape, found.file->path().string(), ": tensor \"", name, "\" has shape ",
             shape_str(found.entry->shape), " but the config expects ", shape_str(shape),
             " (hidden_size ", config.hidden_size, ", heads ", config.num_heads, "/", config.num_kv_heads,
             ", head_dim ", config.head_dim, ", intermediate_size ", config.intermediate_size, ", vocab_size ",
             config.vocab_size, ")");
    slot = found.file->read(*found.entry, dtype);
    const std::int64_t bad = first_non_finite(slot);
    HG_CHECK(bad < 0, found.file->path().string(), ": tensor \"", name, "\" holds ", slot.get(bad), " at element ", bad,
             " (shape ", shape_str(shape), "): weights must be finite, the checkpoint is corrupt");
  });
  check_every_tensor_used(config, checkpoint, weights, used, dtype);
  tie_embeddings(config, weights);
  split_fused_weights(config, weights);
  return weights;
}

float random_weight_amplitude(WeightInit init, const std::vector<std::int64_t>& shape) {
  if (init == WeightInit::ones) return 0.0f;
  // Uniform on [-a, a] has std a/sqrt(3).
  const float std_dev = init == WeightInit::bias ? 0.02f : 1.0f / std::sqrt(static_cast<float>(shape.back()));
  return std_dev * std::sqrt(3.0f);
}

LlamaWeights random_weights(const ModelConfig& config, std::uint64_t seed, DType dtype, Device device) {
  check_compute_dtype("random_weights", dtype);
  HG_CHECK(device == Device::cpu || dtype == DType::bf16, "random_weights: on CUDA the dtype must be bf16, got ",
           dtype_name(dtype));
  LlamaWeights weights;
  for_each_weight(config, weights, [&](const std::string& name, const std::vector<std::int64_t>& shape, Tensor& slot,
                                       WeightInit init) {
    const std::uint64_t key = stream_key(seed, name_stream(name));
    const float amplitude = random_weight_amplitude(init, shape);
    if (init == WeightInit::ones) {
      slot = Tensor::full(shape, 1.0, dtype);
      if (device == Device::cuda) slot = slot.to(Device::cuda);
      return;
    }
    if (device == Device::cuda) {
#ifdef HYDRAGEN_WITH_CUDA
      slot = Tensor::empty(shape, DType::bf16, Device::cuda);
      cuda::fill_uniform(slot, key, amplitude);
      return;
#else
      fail("random_weights: this build has no CUDA backend");
#endif
    }
    Tensor values = Tensor::empty(shape, DType::f32);
    float* out = values.data<float>();
    const std::int64_t n = values.numel();
    constexpr std::int64_t kChunk = 1 << 16;
    ThreadPool::global().parallel_for((n + kChunk - 1) / kChunk, [&](std::int64_t chunk) {
      const std::int64_t end = std::min(n, (chunk + 1) * kChunk);
      for (std::int64_t i = chunk * kChunk; i < end; ++i) {
        out[i] = amplitude * counter_uniform(key, static_cast<std::uint64_t>(i));
      }
    });
    slot = dtype == DType::f32 ? values : values.to(dtype);
  });
  tie_embeddings(config, weights);
  split_fused_weights(config, weights);
  return weights;
}

}  // namespace hydragen
