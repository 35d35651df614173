// Core: bf16/fp16 conversions (round trips, ties, inf, NaN, subnormals), tensor views, and
// the thread pool.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.h"
#include "hydragen/dtype.h"
#include "hydragen/error.h"
#include "hydragen/tensor.h"

namespace hydragen {
namespace {

float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

TEST(Bf16, EveryValueRoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = bf16_to_float(bf16{static_cast<std::uint16_t>(bits)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f)))) << bits;
      continue;
    }
    EXPECT_EQ(float_to_bf16(f).bits, bits) << bits;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  // 1 + 3·2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  // Just above a tie rounds up.
  EXPECT_EQ(bf16_to_float(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f))), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(bf16_to_float(float_to_bf16(-1.0f - std::ldexp(1.0f, -8))), -1.0f);
}

TEST(Bf16, InfinityNanAndSubnormals) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16_to_float(float_to_bf16(inf)), inf);
  EXPECT_EQ(bf16_to_float(float_to_bf16(-inf)), -inf);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(from_bits(0x7f800001u)))));  // NaN payload only in low bits
  EXPECT_EQ(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max())), inf);  // rounds past the largest bf16
  const float subnormal = from_bits(0x00010000u);  // a subnormal that bf16 holds exactly
  EXPECT_EQ(bf16_to_float(float_to_bf16(subnormal)), subnormal);
  EXPECT_EQ(bf16_to_float(float_to_bf16(from_bits(0x00008000u))), 0.0f);          // tie to even: 0
  EXPECT_EQ(bf16_to_float(float_to_bf16(from_bits(0x00018000u))), from_bits(0x00020000u));  // tie to even
}

TEST(Fp16, EveryValueRoundTrips) {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = fp16_to_float(fp16{static_cast<std::uint16_t>(bits)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(f)))) << bits;
      continue;
    }
    EXPECT_EQ(float_to_fp16(f).bits, bits) << bits;
  }
}

TEST(Fp16, RoundsToNearestEven) {
  EXPECT_EQ(fp16_to_float(float_to_fp16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(fp16_to_float(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(fp16_to_float(float_to_fp16(65519.0f)), 65504.0f);  // below the tie to inf
  EXPECT_TRUE(std::isinf(fp16_to_float(float_to_fp16(65520.0f))));
}

TEST(Fp16, InfinityNanAndSubnormals) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fp16_to_float(float_to_fp16(inf)), inf);
  EXPECT_EQ(fp16_to_float(float_to_fp16(-inf)), -inf);
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::nanf("")))));
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)).bits, 0x0001);       // smallest subnormal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)).bits, 0x0000);       // tie between 0 and 2^-24: even
  EXPECT_EQ(float_to_fp16(3 * std::ldexp(1.0f, -25)).bits, 0x0002);   // tie between 1 and 2 ulps: even
  EXPECT_EQ(float_to_fp16(1023.5f * std::ldexp(1.0f, -24)).bits, 0x0400);  // rounds up into the normals
  EXPECT_EQ(float_to_fp16(-std::ldexp(1.0f, -24)).bits, 0x8001);
  EXPECT_EQ(fp16_to_float(fp16{0x03ff}), 1023 * std::ldexp(1.0f, -24));
}

Tensor iota(std::vector<std::int64_t> shape) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(i));
  return t;
}

TEST(TensorViews, SliceSelectReshape) {
  const Tensor t = iota({4, 3, 5});  // t[a, b, c] = 15a + 5b + c
  const Tensor s = t.slice(1, 1, 3);
  EXPECT_EQ(s.shape(), (std::vector<std::int64_t>{4, 2, 5}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.get(0), 5.0);                      // t[0, 1, 0]
  EXPECT_EQ(s.get(2 * 10 + 1 * 5 + 4), 15.0 * 2 + 5 * 2 + 4);  // s[2, 1, 4] = t[2, 2, 4]
  const Tensor row = t.select(0, 3);
  EXPECT_EQ(row.shape(), (std::vector<std::int64_t>{3, 5}));
  EXPECT_EQ(row.get(7), 45.0 + 7);
  const Tensor column = t.select(2, 4);  // t[:, :, 4]
  EXPECT_EQ(column.shape(), (std::vector<std::int64_t>{4, 3}));
  EXPECT_EQ(column.get(4), 15.0 + 5 + 4);        // column[1, 1]
  const Tensor flat = t.reshape({12, 5});
  EXPECT_EQ(flat.get(59), 59.0);
  EXPECT_THROW(s.reshape({40}), Error);
  EXPECT_EQ(s.clone().reshape({40}).get(39), s.get(39));
  EXPECT_EQ(t.slice(0, 2, 2).numel(), 0);        // empty slices are fine
  EXPECT_THROW(t.slice(0, 3, 5), Error);
}

TEST(TensorViews, ConversionsKeepValues) {
  const Tensor t = iota({2, 3, 4});
  const Tensor half = t.to(DType::bf16);
  for (std::int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(half.get(i), t.get(i));
  const Tensor strided = t.slice(2, 1, 3).to(DType::f16);
  EXPECT_TRUE(strided.is_contiguous());
  EXPECT_EQ(strided.get(3), t.get(6));  // [0, 1, 1] of the slice = t[0, 1, 2]
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int workers : {1, 2, 5}) {
    ThreadPool pool(workers);
    for (std::int64_t n : {0, 1, 7, 10000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](std::int64_t i) { hits[i].fetch_add(1); });
      for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "workers " << workers << " index " << i;
    }
  }
}

TEST(ThreadPool, RethrowsAndStaysUsable) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(1000, [](std::int64_t i) { if (i == 17) fail("index ", i); }), Error);
  std::atomic<std::int64_t> sum = 0;
  pool.parallel_for(100, [&](std::int64_t i) { sum += i; });
  EXPECT_EQ(sum.load(), 4950);
  EXPECT_GE(ThreadPool::global().workers(), 1);
}

}  // namespace
}  // namespace hydragen
