// The Llama-family forward pass on a CUDA device in bf16: cuBLAS GEMMs (fused QKV and
// gate/up weights, as Phi-3 stores them) and the fused ops of backend/cuda/model_ops.h (Qwen3's
// per-head q/k RMSNorm among them) over a paged K/V pool, with attention left to the caller
// (the engine's PagedAttentionRunner). The same data flow as Llama::forward_paged (llama.h),
// its CPU twin. Only in builds with HYDRAGEN_WITH_CUDA.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "hydragen/tensor.h"
#include "model/model_config.h"
#include "model/paged_kv.h"
#include "model/weights.h"

namespace hydragen {

// Bytes LlamaCuda's constructor allocates on the device for `weights`: a bf16 copy of every
// tensor not already bf16 and contiguous on the device, and the stacked q/k/v and gate/up
// matrices (new allocations either way; with config.tie_word_embeddings lm_head is embed's).
// The constructor refuses the weights, naming both sizes, before its first upload when this
// exceeds the free memory. Any build (the CPU tests check it).
std::int64_t llama_cuda_upload_bytes(const ModelConfig& config, const LlamaWeights& weights);

class LlamaCuda {
 public:
  // weights of any float dtype, on the CPU or the device (e.g. random_weights(config, seed,
  // DType::bf16, Device::cuda)); they are converted to bf16 on the device.
  LlamaCuda(ModelConfig config, const LlamaWeights& weights);

  const ModelConfig& config() const { return config_; }

  // Device buffers of a batched step for up to `rows` rows (inputs i32, activations bf16,
  // logits f32 for logit_rows of them (-1: all), attention lse f32).
  struct StepBuffers {
    std::int64_t capacity = 0;
    Tensor tokens, positions, slots;           // i32 [rows]
    Tensor x, h, qkv, q, o, delta, gate_up, act;
    Tensor logits;                             // f32 [rows, vocab]
    Tensor lse;                                // f32 [rows, Hq]
  };
  StepBuffers new_step_buffers(std::int64_t rows, std::int64_t logit_rows = -1) const;
  // attend(layer, q, o, lse): enqueue layer `layer`'s attention of q bf16 [rows, Hq, d] into
  // o bf16 [rows, Hq, d] (lse f32 [rows, Hq] is scratch it may write). It is enqueued right
  // after the RoPE launch that writes q and this step's K/V slots, which lets a programmatic
  // dependent start early (cuda::PagedAttentionArgs::q_from_previous_launch).
  using AttendFn = std::function<void(std::int64_t layer, const Tensor& q, Tensor& o, Tensor& lse)>;
  // Enqueues on `stream` the forward pass of the first `rows` rows of `b`, whose tokens,
  // positions and slots are already on the device: each row's K/V goes to its slot of
  // kv_slots(layer) (k, v bf16 [slots, Hkv, d]); `attend` null skips attention (o = q, the
  // `none` mode). With `logits`, b.logits' first rows get f32 logits (only the first
  // logit_rows when that is >= 0). No allocation and no host synchronisation: capturable in a
  // CUDA graph.
  void forward_rows(std::int64_t rows, StepBuffers& b, const std::function<Tensor(std::int64_t)>& k_slots,
                    const std::function<Tensor(std::int64_t)>& v_slots, const AttendFn& attend, bool logits,
                    void* stream, std::int64_t logit_rows = -1) const;

 private:
  struct Layer {
    Tensor attn_norm, w_qkv, b_qkv, q_norm, k_norm, wo, bo, mlp_norm, w_gate_up, w_down;
  };
  ModelConfig config_;
  Tensor embed_, final_norm_, lm_head_, inv_freq_;
  std::vector<Layer> layers_;
};

}  // namespace hydragen
