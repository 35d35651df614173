// Rotary position embedding (RoPE) as Llama applies it: the two halves of each head form
// pairs (x[i], x[i + d/2]) rotated by angle position * inv_freq[i]:
//   x'[i] = x[i] cos - x[i + d/2] sin,   x'[i + d/2] = x[i + d/2] cos + x[i] sin.
// inv_freq[i] = theta^(-2i/d), adjusted by the config's rope scaling (linear or llama3).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "hydragen/tensor.h"
#include "model/model_config.h"

namespace hydragen {

// The head_dim/2 inverse frequencies of the config, in fp32 as transformers computes them.
std::vector<float> rope_inv_freq(const ModelConfig& config);

// Rotates x [rows, heads, head_dim] (f32, contiguous) in place; row r is at positions[r].
void apply_rope(Tensor& x, std::span<const std::int64_t> positions, std::span<const float> inv_freq);

}  // namespace hydragen
