#include "model/llama.h"

#include <cstring>

#include "backend/cpu/paged_attention_cpu.h"
#include "hydragen/error.h"
#include "model/model_ops.h"
#include "model/rope.h"

namespace hydragen {

Llama::Llama(ModelConfig config, LlamaWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)), inv_freq_(rope_inv_freq(config_)) {
  LlamaWeights& w = weights_;
  // Every weight the config needs is defined, f32 and of its expected shape.
  for_each_weight(config_, w, [&](const std::string& name, const std::vector<std::int64_t>& shape, Tensor& slot,
                                  WeightInit) {
    HG_CHECK(slot.defined() && slot.shape() == shape && slot.dtype() == DType::f32 && slot.device() == Device::cpu,
             "Llama: weight ", name, " must be f32 CPU ", shape_str(shape), ", got ",
             slot.defined() ? slot.shape_str() + " " + dtype_name(slot.dtype()) : std::string("nothing"));
  });
  HG_CHECK(w.lm_head.defined(), "Llama: lm_head is missing (tie it to embed for tied embeddings)");
  split_fused_weights(config_, w);
}

Llama::Qkv Llama::project_qkv(std::int64_t layer, const Tensor& x, std::span<const std::int64_t> positions) const {
  const LayerWeights& w = weights_.layers[static_cast<std::size_t>(layer)];
  const std::int64_t rows = x.size(0), d = config_.head_dim;
  const Tensor h = rms_norm(x, w.attn_norm, static_cast<float>(config_.rms_norm_eps));
  Qkv out{linear(h, w.wq, w.bq).reshape({rows, config_.num_heads, d}),
          linear(h, w.wk, w.bk).reshape({rows, config_.num_kv_heads, d}),
          linear(h, w.wv, w.bv).reshape({rows, config_.num_kv_heads, d})};
  if (config_.qk_norm) {  // Qwen3: each head normalised over its head_dim, before RoPE
    const auto eps = static_cast<float>(config_.rms_norm_eps);
    out.q = rms_norm(out.q.reshape({rows * config_.num_heads, d}), w.q_norm, eps).reshape({rows, config_.num_heads, d});
    out.k = rms_norm(out.k.reshape({rows * config_.num_kv_heads, d}), w.k_norm, eps)
                .reshape({rows, config_.num_kv_heads, d});
  }
  apply_rope(out.q, positions, inv_freq_);
  apply_rope(out.k, positions, inv_freq_);
  return out;
}

Tensor Llama::mlp_block(std::int64_t layer, const Tensor& x) const {
  const LayerWeights& w = weights_.layers[static_cast<std::size_t>(layer)];
  const Tensor h = rms_norm(x, w.mlp_norm, static_cast<float>(config_.rms_norm_eps));
  Tensor gate = linear(h, w.w_gate);
  silu_mul(gate, linear(h, w.w_up));
  return linear(gate, w.w_down);
}

Tensor Llama::forward_paged(const StepRows& rows, const plan::AttentionPlan* plan, PagedKv& kv, bool logits,
                            std::int64_t logit_rows) const {
  check_step_rows(rows, config_, kv, plan);
  HG_CHECK(logit_rows <= rows.size(), "Llama::forward_paged: logits of ", logit_rows, " rows asked, the step has ",
           rows.size());
  HG_CHECK(kv.layers() == config_.num_layers && kv.k[0].dtype() == DType::f32 && kv.k[0].device() == Device::cpu,
           "Llama::forward_paged: the pool must be f32 on the CPU with ", config_.num_layers, " layers");
  const std::int64_t n = rows.size(), d = config_.head_dim, hkv = config_.num_kv_heads;
  const std::vector<std::int64_t> positions(rows.positions.begin(), rows.positions.end());
  Tensor x = embed_rows(weights_.embed, rows.tokens);
  for (std::int64_t layer = 0; layer < config_.num_layers; ++layer) {
    const LayerWeights& w = weights_.layers[static_cast<std::size_t>(layer)];
    auto [q, k, v] = project_qkv(layer, x, positions);
    Tensor k_pool = kv.k_slots(layer), v_pool = kv.v_slots(layer);
    for (std::int64_t r = 0; r < n; ++r) {
      const std::int32_t slot = rows.slots[static_cast<std::size_t>(r)];
      if (slot < 0) continue;
      std::memcpy(k_pool.data<float>() + slot * hkv * d, k.data<float>() + r * hkv * d, hkv * d * sizeof(float));
      std::memcpy(v_pool.data<float>() + slot * hkv * d, v.data<float>() + r * hkv * d, hkv * d * sizeof(float));
    }
    Tensor o = q;  // the `none` mode keeps the projections and skips attention
    if (plan != nullptr) {
      o = Tensor::empty(q.shape(), DType::f32);
      cpu::run_attention_plan(*plan, q, kv.k[static_cast<std::size_t>(layer)], kv.v[static_cast<std::size_t>(layer)], o);
    }
    add_into(x, linear(o.reshape({n, config_.q_size()}), w.wo, w.bo));
    add_into(x, mlp_block(layer, x));
  }
  if (!logits || logit_rows == 0) return {};
  if (logit_rows >= 0) x = x.slice(0, 0, logit_rows);
  return linear(rms_norm(x, weights_.final_norm, static_cast<float>(config_.rms_norm_eps)), weights_.lm_head);
}

}  // namespace hydragen
