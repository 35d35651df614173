// exp2_fma (the shared kernel's FMA-pipe exponential, v33) on the CPU, which computes the
// same bits as the device: its relative error bound over every score range the kernel passes
// it, exact powers of two, its floor and no NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "backend/cuda/exp2_fma.h"

namespace hydragen::cuda {
namespace {

double rel_error(float x) { return std::abs(double(exp2_fma(x)) / std::exp2(double(x)) - 1.0); }

TEST(Exp2Fma, RelativeErrorWithinItsBound) {
  double worst = 0, at = 0;
  // Every float in [-2, 2] at a 2^-16 step (both rounding halves of f, every j near 0) ...
  for (int i = -(2 << 16); i <= (2 << 16); ++i) {
    const float x = std::ldexp(float(i), -16);
    if (const double e = rel_error(x); e > worst) worst = e, at = x;
  }
  // ... and random scores over the whole range.
  std::mt19937 gen(12345);
  std::uniform_real_distribution<float> dist(-125.f, 64.f);
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = dist(gen);
    if (const double e = rel_error(x); e > worst) worst = e, at = x;
  }
  EXPECT_LE(worst, kExp2FmaRelError) << "at x = " << at;
  // The bound is tight (the cubic's minimax error): a looser polynomial would show.
  EXPECT_GT(worst, 0.5 * kExp2FmaRelError);
}

TEST(Exp2Fma, IntegersAndHalves) {
  for (int j = -124; j <= 64; ++j) {
    EXPECT_NEAR(exp2_fma(float(j)) / std::ldexp(1.0, j), 1.0, kExp2FmaRelError) << j;
    EXPECT_NEAR(exp2_fma(float(j) + 0.5f) / std::exp2(j + 0.5), 1.0, kExp2FmaRelError) << j;
    EXPECT_NEAR(exp2_fma(float(j) - 0.5f) / std::exp2(j - 0.5), 1.0, kExp2FmaRelError) << j;
  }
  // Monotone across the rounding boundary x = j + 1/2 within the cubic's error.
  EXPECT_LE(exp2_fma(std::nextafter(0.5f, 0.f)), exp2_fma(std::nextafter(0.5f, 1.f)) * (1 + 2 * kExp2FmaRelError));
}

TEST(Exp2Fma, FloorAndNoNaN) {
  const float floor = exp2_fma(-125.f);
  EXPECT_NEAR(floor / std::ldexp(1.0, -125), 1.0, kExp2FmaRelError);
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (float x : {-125.5f, -126.f, -127.f, -200.f, -1e30f, -kInf, std::numeric_limits<float>::quiet_NaN()}) {
    const float y = exp2_fma(x);
    EXPECT_FALSE(std::isnan(y)) << x;
    EXPECT_EQ(y, floor) << x;
  }
}

}  // namespace
}  // namespace hydragen::cuda
