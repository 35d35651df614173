// The Llama-family forward pass on the CPU in fp32: embedding -> per layer { RMSNorm -> QKV
// (+bias) -> RoPE -> append K/V -> attention through tree_attention -> O + residual ->
// RMSNorm -> SwiGLU MLP + residual } -> RMSNorm -> lm_head. It knows nothing of pages or
// plans: a batch names each sequence's own cache and, optionally, a shared prefix cache,
// and the step becomes one SharingTree per layer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "plan/paged_plan.h"
#include "hydragen/attention.h"
#include "hydragen/tensor.h"
#include "model/kv_cache.h"
#include "model/model_config.h"
#include "model/paged_kv.h"
#include "model/weights.h"

namespace hydragen {

// One sequence of a forward step: its new tokens are appended to `cache` (its suffix) and
// attend, causally, to the shared prefix (if any), the cache, and each other.
struct ForwardSequence {
  std::span<const std::int32_t> tokens;
  KvCache* cache = nullptr;
  int prefix = -1;  // index into ForwardBatch::prefixes, or -1
};

struct ForwardBatch {
  std::vector<const KvCache*> prefixes;  // shared, read-only segments (tree roots)
  std::vector<ForwardSequence> sequences;
};

struct ForwardOptions {
  AttentionMode mode = AttentionMode::hydragen;
  bool all_positions = false;  // logits for every new token, else only each sequence's last
};

class Llama {
 public:
  // Weights must be f32 on the CPU, of the config's shapes (load_weights / random_weights).
  Llama(ModelConfig config, LlamaWeights weights);

  const ModelConfig& config() const { return config_; }
  KvCache new_cache() const { return KvCache(config_); }

  // Logits f32: [sum of new tokens, vocab] with all_positions, else [sequences, vocab].
  Tensor forward(const ForwardBatch& batch, const ForwardOptions& options = {}) const;

  // One step over a paged pool (the engine's path): each row's K/V is written at its slot,
  // then attention reads the pool through `plan` (nullptr: attention skipped and o = q, the
  // `none` mode). kv must be f32 on the CPU. Returns logits f32 [rows, vocab] when `logits`
  // (of the first logit_rows rows only when that is >= 0), else an undefined tensor.
  Tensor forward_paged(const StepRows& rows, const plan::AttentionPlan* plan, PagedKv& kv, bool logits,
                       std::int64_t logit_rows = -1) const;

  // Logits [tokens, vocab] of a single prompt, every position.
  Tensor logits(std::span<const std::int32_t> tokens, AttentionMode mode = AttentionMode::hydragen) const;

 private:
  struct Qkv {
    Tensor q, k, v;  // [rows, Hq, d], [rows, Hkv, d] x 2; q and k rotated
  };
  Qkv project_qkv(std::int64_t layer, const Tensor& x, std::span<const std::int64_t> positions) const;
  Tensor attention_block(std::int64_t layer, const Tensor& x, const ForwardBatch& batch,
                         std::span<const std::int64_t> positions, AttentionMode mode) const;
  Tensor mlp_block(std::int64_t layer, const Tensor& x) const;

  ModelConfig config_;
  LlamaWeights weights_;
  std::vector<float> inv_freq_;
};

}  // namespace hydragen
