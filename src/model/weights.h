// The weights of a Llama-family model, named as in Hugging Face checkpoints, loaded from a
// Checkpoint (shape-checked against the config, converted to the compute dtype) or made
// deterministically at random from a seed (for benchmarks without a checkpoint).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hydragen/tensor.h"
#include "model/model_config.h"

namespace hydragen {

class Checkpoint;

struct LayerWeights {
  Tensor attn_norm;           // [hidden]
  Tensor wq, wk, wv, wo;      // [out, in] as stored by PyTorch's Linear: y = x W^T
  Tensor bq, bk, bv, bo;      // [out]; undefined unless the config has biases
  Tensor q_norm, k_norm;      // [head_dim]; Qwen3 only (config.qk_norm)
  // Phi-3 (config.fused_projections): qkv_proj [q; k; v rows] and gate_up_proj [gate; up
  // rows] as stored; wq/wk/wv and w_gate/w_up are then row views of them (split_fused_weights).
  Tensor w_qkv, w_gate_up;
  Tensor mlp_norm;            // [hidden]
  Tensor w_gate, w_up;        // [intermediate, hidden]
  Tensor w_down;              // [hidden, intermediate]
};

struct LlamaWeights {
  Tensor embed;               // [vocab, hidden]
  std::vector<LayerWeights> layers;
  Tensor final_norm;          // [hidden]
  Tensor lm_head;             // [vocab, hidden]; the same storage as embed when tied
};

// How a random weight is initialised.
enum class WeightInit : std::uint8_t { ones, matrix, bias };

// Calls visit(checkpoint name, expected shape, slot, init) for every weight the config needs,
// in checkpoint order. One list serves loading, random init and any other pass over weights.
using WeightVisitor =
    std::function<void(const std::string& name, const std::vector<std::int64_t>& shape, Tensor& slot, WeightInit init)>;
void for_each_weight(const ModelConfig& config, LlamaWeights& weights, const WeightVisitor& visit);

// With config.fused_projections, points wq/wk/wv and w_gate/w_up at the rows of w_qkv and
// w_gate_up (views, no copy); otherwise does nothing. load_weights and random_weights call it.
void split_fused_weights(const ModelConfig& config, LlamaWeights& weights);

// Every weight the config needs, from the checkpoint, as `dtype` (f32, f16, bf16) on the CPU.
// A missing tensor, a shape that differs from the config's, or a stored dtype other than
// F32/F16/BF16 is an Error naming the tensor and the file.
LlamaWeights load_weights(const ModelConfig& config, const Checkpoint& checkpoint, DType dtype = DType::f32);

// Deterministic random weights: element i of tensor `name` is amplitude x
// counter_uniform(stream_key(seed, name_stream(name)), i), a function of (seed, name, i) only,
// so the CPU and a CUDA device (dtype bf16, made in place by cuda::fill_uniform) give the
// same values. Matrices are uniform with std 1/sqrt(fan_in), norms are 1, biases small.
LlamaWeights random_weights(const ModelConfig& config, std::uint64_t seed, DType dtype = DType::f32,
                            Device device = Device::cpu);
// The half-width a of the uniform [-a, a] a random weight of this kind and shape is drawn from.
float random_weight_amplitude(WeightInit init, const std::vector<std::int64_t>& shape);

}  // namespace hydragen
