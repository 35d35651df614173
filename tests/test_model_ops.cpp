// The CPU model ops that no forward-pass test pins down on their own: copy_slots, the K/V row
// copy inside a page pool (the dense baseline's per-sequence copies), and its input checks;
// gather_rows (the engine's fed tokens on a device);
// linear at shapes past the tiny model's (its column blocks on the thread pool).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "hydragen/error.h"
#include "hydragen/tensor.h"
#include "model/model_ops.h"

namespace hydragen {
namespace {

Tensor slot_tensor(std::vector<std::int32_t> slots) {
  Tensor t = Tensor::empty({static_cast<std::int64_t>(slots.size())}, DType::i32);
  for (std::size_t i = 0; i < slots.size(); ++i) t.data<std::int32_t>()[i] = slots[i];
  return t;
}

// linear against a float64 product, with a bias, at shapes whose output columns end inside a
// column block and whose work runs the blocks on the pool (and one that stays on the caller);
// outputs start as NaN (Tensor::empty is uninitialised: every element must be written). Then
// the same inputs again: the same bits.
TEST(ModelOps, LinearMatchesFloat64AcrossColumnBlocks) {
  testing::Rng rng;
  SCOPED_TRACE(rng.trace());
  for (const auto& [rows, in, out] : std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>>{
           {33, 1000, 3000}, {1, 4096, 1030}, {5, 64, 300}, {64, 257, 255}}) {
    const Tensor x = testing::random_tensor({rows, in}, DType::f32, rng);
    const Tensor w = testing::random_tensor({out, in}, DType::f32, rng);
    const Tensor bias = testing::random_tensor({out}, DType::f32, rng);
    const Tensor y = linear(x, w, bias);
    ASSERT_EQ(y.shape(), (std::vector<std::int64_t>{rows, out}));
    double worst = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < out; ++c) {
        double ref = bias.data<float>()[c], magnitude = std::abs(ref);  // magnitude: the sum of |terms|
        for (std::int64_t k = 0; k < in; ++k) {
          const double term = double(x.data<float>()[r * in + k]) * double(w.data<float>()[c * in + k]);
          ref += term, magnitude += std::abs(term);
        }
        const double got = y.data<float>()[r * out + c];
        ASSERT_TRUE(std::isfinite(got)) << rows << "x" << in << "x" << out << " at " << r << ", " << c;
        worst = std::max(worst, std::abs(got - ref) / magnitude);
      }
    // fp32 sums of `in` terms: well under in x 2^-24 of the terms' magnitude; a wrong block
    // offset or an unwritten column is off by the whole magnitude.
    EXPECT_LE(worst, 1e-5) << rows << "x" << in << "x" << out;
    const Tensor again = linear(x, w, bias);
    EXPECT_EQ(std::memcmp(again.data<float>(), y.data<float>(), y.bytes()), 0) << rows << "x" << in << "x" << out;
  }
}

TEST(ModelOps, CopySlotsCopiesRowsInsideThePool) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const std::int64_t slots = 40, hkv = 2, d = 8, row = hkv * d;
    Tensor pool = Tensor::empty({slots, hkv, d}, dtype);
    for (std::int64_t i = 0; i < pool.numel(); ++i) pool.set(i, static_cast<double>(i));  // exact in bf16 below 256
    const Tensor before = pool.clone();
    const std::vector<std::int32_t> src{3, 17, 0, 39}, dst{20, 5, 38, 1};
    copy_slots(slot_tensor(src), slot_tensor(dst), pool);
    std::vector<std::int64_t> source_of(slots);
    for (std::int64_t s = 0; s < slots; ++s) source_of[s] = s;
    for (std::size_t i = 0; i < src.size(); ++i) source_of[dst[i]] = src[i];
    for (std::int64_t s = 0; s < slots; ++s)
      for (std::int64_t j = 0; j < row; ++j)
        ASSERT_EQ(pool.get(s * row + j), before.get(source_of[s] * row + j)) << dtype_name(dtype) << " slot " << s;
  }
  Tensor empty_pool = Tensor::zeros({4, 1, 8}, DType::f32);
  EXPECT_NO_THROW(copy_slots(slot_tensor({}), slot_tensor({}), empty_pool));
}

void expect_error(const std::vector<std::int32_t>& src, const std::vector<std::int32_t>& dst, const std::string& words) {
  Tensor pool = Tensor::zeros({10, 2, 4}, DType::f32);
  try {
    copy_slots(slot_tensor(src), slot_tensor(dst), pool);
    FAIL() << "expected an error mentioning '" << words << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(ModelOps, CopySlotsRejectsBadSlots) {
  expect_error({0, 1}, {2}, "same length");
  expect_error({0, 10}, {2, 3}, "has slots [0, 10)");
  expect_error({-1}, {2}, "has slots [0, 10)");
  expect_error({0, 1}, {2, 2}, "names a slot twice");
  expect_error({0, 2}, {2, 3}, "both a source");
  Tensor pool = Tensor::zeros({10, 2, 4}, DType::f32);
  Tensor slots64 = Tensor::zeros({1}, DType::f32);
  try {
    copy_slots(slots64, slot_tensor({1}), pool);
    FAIL() << "f32 slots should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("src_slots must be a contiguous i32"), std::string::npos) << e.what();
  }
  Tensor flat = Tensor::zeros({40}, DType::f32);
  EXPECT_THROW(copy_slots(slot_tensor({0}), slot_tensor({1}), flat), Error);
}

// gather_rows: each row of dst is the indexed row of src (repeats and any order allowed), for
// rows of one i32 (the engine's fed tokens) and of several bf16; bad shapes and indices throw.
TEST(ModelOps, GatherRowsCopiesTheIndexedRows) {
  const Tensor tokens = slot_tensor({11, 22, 33, 44});
  Tensor picked = Tensor::empty({3}, DType::i32);
  gather_rows(tokens, slot_tensor({3, 0, 3}), picked);
  EXPECT_EQ(std::vector<std::int32_t>(picked.data<std::int32_t>(), picked.data<std::int32_t>() + 3),
            (std::vector<std::int32_t>{44, 11, 44}));
  Tensor rows = Tensor::empty({5, 2, 3}, DType::bf16);
  for (std::int64_t i = 0; i < rows.numel(); ++i) rows.set(i, static_cast<double>(i));
  Tensor out = Tensor::empty({2, 2, 3}, DType::bf16);
  gather_rows(rows, slot_tensor({4, 1}), out);
  for (std::int64_t j = 0; j < 6; ++j) {
    EXPECT_EQ(out.get(j), rows.get(4 * 6 + j));
    EXPECT_EQ(out.get(6 + j), rows.get(6 + j));
  }
  Tensor empty_out = Tensor::empty({0}, DType::i32);
  EXPECT_NO_THROW(gather_rows(tokens, slot_tensor({}), empty_out));
  auto expect_gather_error = [](const Tensor& src, const Tensor& index, Tensor dst, const std::string& words) {
    try {
      gather_rows(src, index, dst);
      FAIL() << "expected an error mentioning '" << words << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_gather_error(tokens, slot_tensor({4}), Tensor::empty({1}, DType::i32), "outside src's rows [0, 4)");
  expect_gather_error(tokens, slot_tensor({0, 1}), Tensor::empty({1}, DType::i32), "one row per index");
  expect_gather_error(tokens, slot_tensor({0}), Tensor::empty({1}, DType::f32), "one row per index");
  expect_gather_error(tokens, Tensor::zeros({1}, DType::f32), Tensor::empty({1}, DType::i32), "index must be");
}

}  // namespace
}  // namespace hydragen
