#include "backend/cpu/online_softmax.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/blas.h"

namespace hydragen::cpu {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// exp for x <= 0 (here x = s − m'), branch-free so the compiler vectorises the row loop;
// std::exp is a library call per element and would cost as much as the GEMMs. Cephes'
// expf: x = n·ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial, 2^n by exponent bits;
// relative error ~2 ulp. Below -87 the result would be subnormal; 1.6e-38 is as good as 0
// next to the row's largest term, which is exactly 1.
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const auto exponent_bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(exponent_bits);
}

}  // namespace

OnlineSoftmaxTile::OnlineSoftmaxTile(std::int64_t rows, std::int64_t head_dim)
    : rows_(rows),
      head_dim_(head_dim),
      queries_(rows * head_dim),
      scores_(rows * kKeyBlock),
      accumulators_(rows * head_dim, 0.0f),
      running_max_(rows, kMinusInf),
      running_sum_(rows, 0.0f) {
  use_single_threaded_blas();
}

void OnlineSoftmaxTile::attend(const float* k, std::int64_t k_stride, const float* v, std::int64_t v_stride,
                               std::int64_t keys, const std::int64_t* visible_keys) {
  if (rows_ == 0) return;
  if (visible_keys) keys = std::min(keys, *std::max_element(visible_keys, visible_keys + rows_));
  const auto d = static_cast<int>(head_dim_);
  const auto m = static_cast<int>(rows_);
  for (std::int64_t block = 0; block < keys; block += kKeyBlock) {
    const auto n = static_cast<int>(std::min(kKeyBlock, keys - block));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, d, 1.0f, queries_.data(), d,
                k + block * k_stride, static_cast<int>(k_stride), 0.0f, scores_.data(), n);
    for (std::int64_t i = 0; i < rows_; ++i) {
      float* s = scores_.data() + i * n;
      const std::int64_t limit = visible_keys ? std::clamp<std::int64_t>(visible_keys[i] - block, 0, n) : n;
      float block_max = kMinusInf;
      bool finite = true;
      for (std::int64_t j = 0; j < limit; ++j) block_max = std::max(block_max, s[j]), finite &= std::isfinite(s[j]);
      if (!finite || std::isnan(running_max_[i])) {  // a NaN or infinite score: the row is NaN, never "empty"
        running_max_[i] = running_sum_[i] = std::numeric_limits<float>::quiet_NaN();
        std::fill(accumulators_.data() + i * head_dim_, accumulators_.data() + (i + 1) * head_dim_, running_sum_[i]);
        std::fill(s, s + n, 0.0f);
        continue;
      }
      const float new_max = std::max(running_max_[i], block_max);
      if (new_max == kMinusInf) {  // no visible key yet: keep the row empty, contribute nothing
        std::fill(s, s + n, 0.0f);
        continue;
      }
      if (new_max != running_max_[i]) {
        const float correction = std::exp(running_max_[i] - new_max);  // exp(-inf) = 0 for a fresh row
        running_sum_[i] *= correction;
        float* a = accumulators_.data() + i * head_dim_;
        for (std::int64_t j = 0; j < head_dim_; ++j) a[j] *= correction;
        running_max_[i] = new_max;
      }
      float sum = 0;
      for (std::int64_t j = 0; j < limit; ++j) sum += (s[j] = exp_nonpositive(s[j] - new_max));
      std::fill(s + limit, s + n, 0.0f);
      running_sum_[i] += sum;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, n, 1.0f, scores_.data(), n,
                v + block * v_stride, static_cast<int>(v_stride), 1.0f, accumulators_.data(), d);
  }
}

void OnlineSoftmaxTile::finish() {
  for (std::int64_t i = 0; i < rows_; ++i) {
    float* a = accumulators_.data() + i * head_dim_;
    if (running_sum_[i] == 0) {  // saw no key: the empty state
      std::fill(a, a + head_dim_, 0.0f);
      running_max_[i] = kMinusInf;
      continue;
    }
    const float inverse = 1.0f / running_sum_[i];
    for (std::int64_t j = 0; j < head_dim_; ++j) a[j] *= inverse;
    running_max_[i] += std::log(running_sum_[i]);
  }
}

}  // namespace hydragen::cpu
