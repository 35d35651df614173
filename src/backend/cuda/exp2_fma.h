// 2^x on the FMA pipe (v33, docs/perf-notes.md): the shared-segment kernel's softmax takes one
// exponential per score, and at head dim 128 those exponentials keep the SM's MUFU unit busy
// half as long as the tensor cores; computing part of them with FMAs moves that work to a pipe
// with eight times the throughput. Host and device compute the same bits, so the CPU test
// checks the bound the device relies on.
//
// x is clamped to [-125, inf): below, the result is 2^-125 instead of 0 (callers pass only
// scores of unmasked keys, whose weight that small is nothing next to the row's maximum, 1).
// Then x = j + f with j = round(x) (adding 1.5 * 2^23 rounds to an integer held in the sum's
// low mantissa bits) and f in [-0.5, 0.5]; 2^f by a minimax cubic (relative error < 7.5e-5,
// 50x below the bf16 rounding of P that follows); 2^j added to the result's exponent field.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HG_EXP2_FMA_FN __host__ __device__ __forceinline__
#else
#define HG_EXP2_FMA_FN inline
#endif

namespace hydragen::cuda {

// Largest relative error of exp2_fma over x in [-125, 64] (tests/test_exp2_fma.cpp checks it).
inline constexpr double kExp2FmaRelError = 7.5e-5;

HG_EXP2_FMA_FN std::uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

HG_EXP2_FMA_FN float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

HG_EXP2_FMA_FN float exp2_fma(float x) {
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23
  x = x > -125.f ? x : -125.f;          // (also maps -inf and NaN to -125: no NaN out)
  const float t = x + kRound;
  const float f = x - (t - kRound);
#if defined(__CUDA_ARCH__)
  const float p = fmaf(fmaf(fmaf(0.0551716685f, f, 0.242611125f), f, 0.693260968f), f, 0.999928057f);
#else
  const float p = __builtin_fmaf(__builtin_fmaf(__builtin_fmaf(0.0551716685f, f, 0.242611125f), f, 0.693260968f), f,
                                 0.999928057f);
#endif
  return bits_float(float_bits(p) + (float_bits(t) << 23));
}

}  // namespace hydragen::cuda
