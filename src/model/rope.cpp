#include "model/rope.h"

#include <cmath>
#include <numbers>

#include "hydragen/error.h"

namespace hydragen {

namespace {

// Llama 3.1: wavelengths longer than original_context / low_freq_factor are slowed down by
// `factor`, shorter than original_context / high_freq_factor are kept, and the band between
// interpolates linearly in original_context / wavelength.
float llama3_scaled(float inv_freq, const RopeConfig& rope) {
  const double context = static_cast<double>(rope.original_max_position_embeddings);
  const double low_freq_wavelength = context / rope.low_freq_factor;
  const double high_freq_wavelength = context / rope.high_freq_factor;
  const double wavelength = 2.0 * std::numbers::pi / inv_freq;
  if (wavelength < high_freq_wavelength) return inv_freq;
  if (wavelength > low_freq_wavelength) return static_cast<float>(inv_freq / rope.factor);
  const double smooth = (context / wavelength - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
  return static_cast<float>((1.0 - smooth) * inv_freq / rope.factor + smooth * inv_freq);
}

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  const std::int64_t half = config.head_dim / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(config.head_dim);
    float f = static_cast<float>(1.0 / std::pow(config.rope.theta, static_cast<double>(exponent)));
    switch (config.rope.scaling) {
      case RopeScaling::none: break;
      case RopeScaling::linear: f = static_cast<float>(f / config.rope.factor); break;
      case RopeScaling::llama3: f = llama3_scaled(f, config.rope); break;
    }
    inv_freq[static_cast<std::size_t>(i)] = f;
  }
  return inv_freq;
}

void apply_rope(Tensor& x, std::span<const std::int64_t> positions, std::span<const float> inv_freq) {
  HG_CHECK(x.rank() == 3 && x.dtype() == DType::f32 && x.is_contiguous() && x.device() == Device::cpu,
           "apply_rope: x must be a contiguous f32 CPU tensor [rows, heads, head_dim], got ", x.shape_str());
  const std::int64_t rows = x.size(0), heads = x.size(1), dim = x.size(2), half = dim / 2;
  HG_CHECK(static_cast<std::int64_t>(positions.size()) == rows, "apply_rope: ", positions.size(),
           " positions for ", rows, " rows");
  HG_CHECK(static_cast<std::int64_t>(inv_freq.size()) == half && dim % 2 == 0, "apply_rope: ", inv_freq.size(),
           " frequencies for head_dim ", dim, ", expected head_dim / 2");
  std::vector<float> cos_values(static_cast<std::size_t>(half)), sin_values(static_cast<std::size_t>(half));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[r]) * inv_freq[i];  // fp32, as transformers
      cos_values[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_values[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    for (std::int64_t h = 0; h < heads; ++h) {
      float* v = x.data<float>() + (r * heads + h) * dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cos_values[i] - b * sin_values[i];
        v[i + half] = b * cos_values[i] + a * sin_values[i];
      }
    }
  }
}

}  // namespace hydragen
