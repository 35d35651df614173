// The Llama-family forward pass on the CPU in fp32, over a paged K/V pool (the engine's path):
// embedding -> per layer { RMSNorm -> QKV (+bias) -> (Qwen3: RMSNorm per q/k head) -> RoPE -> K/V written at each row's slot ->
// attention through the step's plan (cpu::run_attention_plan) -> O + residual -> RMSNorm ->
// SwiGLU MLP + residual } -> RMSNorm -> lm_head.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "plan/paged_plan.h"
#include "hydragen/tensor.h"
#include "model/model_config.h"
#include "model/paged_kv.h"
#include "model/weights.h"

namespace hydragen {

class Llama {
 public:
  // Weights must be f32 on the CPU, of the config's shapes (load_weights / random_weights).
  Llama(ModelConfig config, LlamaWeights weights);

  const ModelConfig& config() const { return config_; }

  // One step over a paged pool (the engine's path): each row's K/V is written at its slot,
  // then attention reads the pool through `plan` (nullptr: attention skipped and o = q, the
  // `none` mode). kv must be f32 on the CPU. Returns logits f32 [rows, vocab] when `logits`
  // (of the first logit_rows rows only when that is >= 0), else an undefined tensor.
  Tensor forward_paged(const StepRows& rows, const plan::AttentionPlan* plan, PagedKv& kv, bool logits,
                       std::int64_t logit_rows = -1) const;

 private:
  struct Qkv {
    Tensor q, k, v;  // [rows, Hq, d], [rows, Hkv, d] x 2; q and k rotated
  };
  Qkv project_qkv(std::int64_t layer, const Tensor& x, std::span<const std::int64_t> positions) const;
  Tensor mlp_block(std::int64_t layer, const Tensor& x) const;

  ModelConfig config_;
  LlamaWeights weights_;
  std::vector<float> inv_freq_;
};

}  // namespace hydragen
