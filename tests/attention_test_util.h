// Helpers shared by the attention tests: seeded random data, the one error metric, NaN
// checks. Every test draws a fresh seed (HYDRAGEN_TEST_SEED replays one) and prints it
// with SCOPED_TRACE, so a failure names the seed that reproduces it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "hydragen/attention.h"
#include "hydragen/error.h"

namespace hydragen::testing {

inline std::uint64_t test_seed() {
  if (const char* env = std::getenv("HYDRAGEN_TEST_SEED"); env && *env) return std::strtoull(env, nullptr, 10);
  return (std::uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

struct Rng {
  std::uint64_t seed = test_seed();
  std::mt19937_64 engine{seed};
  std::string trace() const { return "seed " + std::to_string(seed) + " (replay: HYDRAGEN_TEST_SEED=" + std::to_string(seed) + ")"; }
  int uniform_int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(engine); }
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(engine); }
  template <class T>
  const T& pick(const std::vector<T>& options) { return options[uniform_int(0, static_cast<int>(options.size()) - 1)]; }
};

// Standard normal entries, stored in dtype (rounded when the dtype is narrower).
inline Tensor random_tensor(const std::vector<std::int64_t>& shape, DType dtype, Rng& rng) {
  Tensor t = Tensor::empty(shape, dtype);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, rng.normal());
  return t;
}

// The one error metric of these tests: max |out − ref| / max |ref|, over all elements.
// Equal infinities (the lse of an empty state) count as exact; a NaN anywhere is error inf.
inline double relative_max_error(const Tensor& out, const Tensor& ref) {
  EXPECT_EQ(out.shape(), ref.shape());
  double max_error = 0, max_ref = 0;
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    const double a = out.get(i), b = ref.get(i);
    if (std::isnan(a) || std::isnan(b)) return INFINITY;
    if (std::isinf(b) || std::isinf(a)) {
      if (a != b) return INFINITY;
      continue;
    }
    max_error = std::max(max_error, std::abs(a - b));
    max_ref = std::max(max_ref, std::abs(b));
  }
  return max_error / std::max(max_ref, 1e-30);
}

inline bool has_nan(const Tensor& t) {
  for (std::int64_t i = 0; i < t.numel(); ++i)
    if (std::isnan(t.get(i))) return true;
  return false;
}

// o and lse of `out` match the float64 reference within `tolerance` (relative_max_error),
// and nothing is NaN. lse is compared relative to max(1, max |lse|) so that lse ≈ 0 does
// not make the test demand more than f32 can give.
inline void expect_state_near(const AttentionState& out, const AttentionState& ref, double tolerance,
                              const std::string& what) {
  ASSERT_EQ(out.o.shape(), ref.o.shape()) << what;
  ASSERT_EQ(out.lse.shape(), ref.lse.shape()) << what;
  EXPECT_FALSE(has_nan(out.o)) << what << ": o has NaN";
  EXPECT_FALSE(has_nan(out.lse)) << what << ": lse has NaN";
  EXPECT_LE(relative_max_error(out.o, ref.o), tolerance) << what << ": o";
  double max_lse = 1;
  for (std::int64_t i = 0; i < ref.lse.numel(); ++i)
    if (std::isfinite(ref.lse.get(i))) max_lse = std::max(max_lse, std::abs(ref.lse.get(i)));
  double max_lse_error = 0;
  for (std::int64_t i = 0; i < ref.lse.numel(); ++i) {
    const double a = out.lse.get(i), b = ref.lse.get(i);
    max_lse_error = std::max(max_lse_error, a == b ? 0.0 : std::abs(a - b));
  }
  EXPECT_LE(max_lse_error / max_lse, tolerance) << what << ": lse";
}

}  // namespace hydragen::testing
