#include "model/llama_cuda.h"

namespace hydragen {

namespace {

// A weight LlamaCuda uses where it is (random weights made on the device), without a copy.
bool bf16_in_place(const Tensor& t) {
  return t.dtype() == DType::bf16 && t.device() == Device::cuda && t.is_contiguous();
}

}  // namespace

std::int64_t llama_cuda_upload_bytes(const ModelConfig& config, const LlamaWeights& weights) {
  auto copied = [](const Tensor& t) -> std::int64_t {  // device_bf16's new allocation, if any
    return !t.defined() || bf16_in_place(t) ? 0 : 2 * t.numel();
  };
  auto stacked = [](std::initializer_list<const Tensor*> parts) -> std::int64_t {
    std::int64_t elements = 0;
    for (const Tensor* part : parts) elements += part->defined() ? part->numel() : 0;
    return 2 * elements;
  };
  std::int64_t bytes =
      copied(weights.embed) + copied(weights.final_norm) + (config.tie_word_embeddings ? 0 : copied(weights.lm_head));
  for (const LayerWeights& w : weights.layers) {
    bytes += copied(w.attn_norm) + copied(w.wo) + copied(w.bo) + copied(w.mlp_norm) + copied(w.w_down);
    bytes += copied(w.q_norm) + copied(w.k_norm);
    bytes += stacked({&w.wq, &w.wk, &w.wv}) + stacked({&w.w_gate, &w.w_up});
    if (config.qkv_bias) bytes += stacked({&w.bq, &w.bk, &w.bv});
  }
  return bytes;
}

}  // namespace hydragen

#ifdef HYDRAGEN_WITH_CUDA

#include <cuda_runtime.h>

#include "backend/cuda/model_ops.h"
#include "hydragen/error.h"
#include "model/rope.h"

namespace hydragen {

namespace {

Tensor device_bf16(const Tensor& t) {
  if (!t.defined()) return {};
  if (bf16_in_place(t)) return t;  // share it, no second copy
  Tensor out = Tensor::empty(t.shape(), DType::bf16, Device::cuda);
  out.copy_from(t.is_contiguous() ? t : t.clone());
  return out;
}

// Rows of several [n_i, in] weights stacked into one [sum n_i, in] device matrix.
Tensor stack_rows(std::initializer_list<const Tensor*> parts) {
  std::int64_t rows = 0;
  for (const Tensor* part : parts) rows += part->size(0);
  const std::vector<std::int64_t> tail = [&] {
    std::vector<std::int64_t> shape = (*parts.begin())->shape();
    shape.erase(shape.begin());
    return shape;
  }();
  std::vector<std::int64_t> shape{rows};
  shape.insert(shape.end(), tail.begin(), tail.end());
  Tensor out = Tensor::empty(shape, DType::bf16, Device::cuda);
  std::int64_t at = 0;
  for (const Tensor* part : parts) {
    out.slice(0, at, at + part->size(0)).copy_from(device_bf16(*part));
    at += part->size(0);
  }
  return out;
}

}  // namespace

LlamaCuda::LlamaCuda(ModelConfig config, const LlamaWeights& weights) : config_(std::move(config)) {
  HG_CHECK(static_cast<std::int64_t>(weights.layers.size()) == config_.num_layers, "LlamaCuda: ",
           weights.layers.size(), " layers of weights for a config of ", config_.num_layers);
  std::size_t free_bytes = 0, total_bytes = 0;
  HG_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess, "LlamaCuda: cudaMemGetInfo failed");
  const std::int64_t need = llama_cuda_upload_bytes(config_, weights);
  HG_CHECK(need <= static_cast<std::int64_t>(free_bytes), "the model's weights take ", need >> 20,
           " MiB on the device in bf16, and it has ", free_bytes >> 20, " MiB free of ", total_bytes >> 20,
           " MiB: the model does not fit this GPU");
  embed_ = device_bf16(weights.embed);
  final_norm_ = device_bf16(weights.final_norm);
  lm_head_ = config_.tie_word_embeddings ? embed_ : device_bf16(weights.lm_head);
  const std::vector<float> inv_freq = rope_inv_freq(config_);
  inv_freq_ = Tensor::empty({static_cast<std::int64_t>(inv_freq.size())}, DType::f32, Device::cuda);
  inv_freq_.copy_from(Tensor::wrap(const_cast<float*>(inv_freq.data()), inv_freq_.shape(), DType::f32));
  for (const LayerWeights& w : weights.layers) {
    Layer layer;
    layer.attn_norm = device_bf16(w.attn_norm);
    layer.w_qkv = stack_rows({&w.wq, &w.wk, &w.wv});
    if (config_.qkv_bias) layer.b_qkv = stack_rows({&w.bq, &w.bk, &w.bv});
    layer.q_norm = device_bf16(w.q_norm);
    layer.k_norm = device_bf16(w.k_norm);
    layer.wo = device_bf16(w.wo);
    layer.bo = device_bf16(w.bo);
    layer.mlp_norm = device_bf16(w.mlp_norm);
    layer.w_gate_up = stack_rows({&w.w_gate, &w.w_up});
    layer.w_down = device_bf16(w.w_down);
    layers_.push_back(std::move(layer));
  }
}

LlamaCuda::StepBuffers LlamaCuda::new_step_buffers(std::int64_t rows, std::int64_t logit_rows) const {
  const std::int64_t hidden = config_.hidden_size, d = config_.head_dim;
  const std::int64_t hq = config_.num_heads, hkv = config_.num_kv_heads;
  auto bf16 = [&](std::vector<std::int64_t> shape) { return Tensor::zeros(std::move(shape), DType::bf16, Device::cuda); };
  StepBuffers b;
  b.capacity = rows;
  b.tokens = Tensor::zeros({rows}, DType::i32, Device::cuda);
  b.positions = Tensor::zeros({rows}, DType::i32, Device::cuda);
  b.slots = Tensor::zeros({rows}, DType::i32, Device::cuda);
  b.x = bf16({rows, hidden});
  b.h = bf16({rows, hidden});
  b.qkv = bf16({rows, (hq + 2 * hkv) * d});
  b.q = bf16({rows, hq, d});
  b.o = bf16({rows, hq, d});
  b.delta = bf16({rows, hidden});
  b.gate_up = bf16({rows, 2 * config_.intermediate_size});
  b.act = bf16({rows, config_.intermediate_size});
  b.logits = Tensor::zeros({logit_rows >= 0 ? std::min(logit_rows, rows) : rows, config_.vocab_size}, DType::f32,
                          Device::cuda);
  b.lse = Tensor::zeros({rows, hq}, DType::f32, Device::cuda);
  return b;
}

void LlamaCuda::forward_rows(std::int64_t rows, StepBuffers& b, const std::function<Tensor(std::int64_t)>& k_slots,
                             const std::function<Tensor(std::int64_t)>& v_slots, const AttendFn& attend, bool logits,
                             void* stream, std::int64_t logit_rows) const {
  HG_CHECK(rows > 0 && rows <= b.capacity, "LlamaCuda::forward_rows: ", rows, " rows for buffers of ", b.capacity);
  if (logits && logit_rows < 0) logit_rows = rows;
  HG_CHECK(!logits || logit_rows <= std::min(rows, b.logits.size(0)), "LlamaCuda::forward_rows: logits of ",
           logit_rows, " rows asked, the step has ", rows, " and the buffers hold ", b.logits.size(0));
  const std::int64_t d = config_.head_dim, hq = config_.num_heads, hkv = config_.num_kv_heads;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  auto first = [rows](const Tensor& t) { return t.slice(0, 0, rows); };
  Tensor x = first(b.x), h = first(b.h), qkv = first(b.qkv), q = first(b.q), o = first(b.o), delta = first(b.delta),
         gate_up = first(b.gate_up), act = first(b.act), lse = first(b.lse);
  const Tensor positions = first(b.positions), slots = first(b.slots);
  cuda::embed_rows(embed_, first(b.tokens), x, stream);
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    cuda::add_rms_norm(x, l == 0 ? Tensor{} : delta, layer.attn_norm, eps, h, stream);
    cuda::linear(h, layer.w_qkv, qkv, stream);
    if (layer.b_qkv.defined()) cuda::add_bias(qkv, layer.b_qkv, stream);
    if (layer.q_norm.defined()) cuda::qk_rms_norm(qkv, hq, hkv, layer.q_norm, layer.k_norm, eps, stream);
    Tensor k_cache = k_slots(static_cast<std::int64_t>(l)), v_cache = v_slots(static_cast<std::int64_t>(l));
    // The rotated q heads go straight into the attention's contiguous q; `none` uses them as o.
    cuda::rope_append_kv(qkv, hq, hkv, positions, inv_freq_, slots, k_cache, v_cache, attend ? &q : &o, stream);
    if (attend) attend(static_cast<std::int64_t>(l), q, o, lse);
    cuda::linear(o.reshape({rows, hq * d}), layer.wo, delta, stream);
    if (layer.bo.defined()) cuda::add_bias(delta, layer.bo, stream);
    cuda::add_rms_norm(x, delta, layer.mlp_norm, eps, h, stream);
    cuda::linear(h, layer.w_gate_up, gate_up, stream);
    cuda::silu_mul(gate_up, act, stream);
    cuda::linear(act, layer.w_down, delta, stream);
  }
  if (!logits || logit_rows == 0) return;
  // Only the rows that are sampled: the final norm and lm_head of the first logit_rows.
  auto head = [logit_rows](const Tensor& t) { return t.slice(0, 0, logit_rows); };
  Tensor x_head = head(x), h_head = head(h);
  cuda::add_rms_norm(x_head, head(delta), final_norm_, eps, h_head, stream);
  // f32 logits: bf16 rounding (a step of 1/32 at |8|) would tie close greedy candidates.
  Tensor out = head(b.logits);
  cuda::linear(h_head, lm_head_, out, stream);
}

}  // namespace hydragen

#endif  // HYDRAGEN_WITH_CUDA
