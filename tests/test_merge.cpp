// merge_states: exactness against attention over split keys, associativity, commutativity,
// empty states (never NaN), extreme lse values, and n-way = fold of two-way.
#include <cmath>
#include <limits>

#include "attention_test_util.h"

namespace hydragen::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// A state with random o and lse drawn from [lo, hi].
AttentionState random_state(std::int64_t rows, std::int64_t heads, std::int64_t d, Rng& rng, double lo = -5,
                            double hi = 5) {
  AttentionState state{random_tensor({rows, heads, d}, DType::f32, rng), Tensor::empty({rows, heads}, DType::f32)};
  for (std::int64_t i = 0; i < state.lse.numel(); ++i)
    state.lse.set(i, std::uniform_real_distribution<double>(lo, hi)(rng.engine));
  return state;
}

AttentionState copy(const AttentionState& s) { return {s.o.clone(), s.lse.clone()}; }

AttentionState merged(const AttentionState& a, const AttentionState& b) {
  AttentionState out = copy(a);
  merge_states(out, b);
  return out;
}

// One (row, head) state with every o element equal to `o`.
AttentionState single(float o, float lse, std::int64_t d = 4) {
  return {Tensor::full({1, 1, d}, o, DType::f32), Tensor::full({1, 1}, lse, DType::f32)};
}

TEST(MergeStates, SplitKeysEqualWholeAttention) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const Tensor q = random_tensor({3, 8, 64}, DType::f32, rng);
  const Tensor k = random_tensor({300, 2, 64}, DType::f32, rng);
  const Tensor v = random_tensor({300, 2, 64}, DType::f32, rng);
  const AttentionState whole = attend(q, k, v);
  const AttentionState parts[3] = {attend(q, k.slice(0, 0, 17), v.slice(0, 0, 17)),
                                   attend(q, k.slice(0, 17, 17), v.slice(0, 17, 17)),  // empty part
                                   attend(q, k.slice(0, 17, 300), v.slice(0, 17, 300))};
  expect_state_near(merge_states(parts), whole, 1e-5, "n-way");
  expect_state_near(merged(merged(parts[0], parts[1]), parts[2]), whole, 1e-5, "two-way");
}

TEST(MergeStates, AssociativeAndCommutative) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const AttentionState a = random_state(5, 4, 32, rng), b = random_state(5, 4, 32, rng), c = random_state(5, 4, 32, rng);
  expect_state_near(merged(merged(a, b), c), merged(a, merged(b, c)), 1e-5, "associative");
  expect_state_near(merged(a, b), merged(b, a), 1e-5, "commutative");
}

TEST(MergeStates, NWayEqualsFoldOfTwoWay) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  std::vector<AttentionState> states;
  for (int i = 0; i < 20; ++i) states.push_back(random_state(3, 2, 16, rng, -30, 30));
  states[4] = AttentionState::empty(3, 2, 16);
  AttentionState fold = copy(states[0]);
  for (std::size_t i = 1; i < states.size(); ++i) merge_states(fold, states[i]);
  expect_state_near(merge_states(states), fold, 1e-5, "n-way vs fold");
  expect_state_near(merge_states(std::span(states).first(1)), states[0], 0, "one state");
}

TEST(MergeStates, EmptyIsTheIdentity) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  const AttentionState a = random_state(4, 3, 8, rng);
  const AttentionState empty = AttentionState::empty(4, 3, 8);
  expect_state_near(merged(a, empty), a, 0, "a + empty");
  expect_state_near(merged(empty, a), a, 0, "empty + a");
}

TEST(MergeStates, EmptyPlusEmptyIsEmptyWithoutNaN) {
  const AttentionState empty = AttentionState::empty(2, 2, 8);
  for (const AttentionState& state : {merged(empty, empty), merge_states(std::vector{empty, empty, empty})}) {
    EXPECT_FALSE(has_nan(state.o));
    EXPECT_FALSE(has_nan(state.lse));
    for (std::int64_t i = 0; i < state.lse.numel(); ++i) EXPECT_EQ(state.lse.get(i), -kInf);
    for (std::int64_t i = 0; i < state.o.numel(); ++i) EXPECT_EQ(state.o.get(i), 0.0);
  }
}

TEST(MergeStates, ExtremeLse) {
  struct Case {
    float lse_a, lse_b;
  };
  // ±80 and beyond: exp(100) overflows f32, so this only passes with max subtraction.
  for (const Case c : {Case{80, -80}, Case{-80, 80}, Case{80, 80}, Case{-80, -80}, Case{100, 99}, Case{-100, -101},
                       Case{80, -kInf}, Case{-kInf, -80}}) {
    SCOPED_TRACE(concat("lse ", c.lse_a, " and ", c.lse_b));
    const AttentionState out = merged(single(1.0f, c.lse_a), single(3.0f, c.lse_b));
    const double a = c.lse_a, b = c.lse_b, m = std::max(a, b);
    const double wa = std::exp(a - m), wb = std::exp(b - m);
    EXPECT_FALSE(has_nan(out.o));
    EXPECT_NEAR(out.lse.get(0), m + std::log(wa + wb), 1e-5 * std::abs(m));
    for (std::int64_t i = 0; i < out.o.numel(); ++i) EXPECT_NEAR(out.o.get(i), (wa * 1 + wb * 3) / (wa + wb), 1e-6);
  }
}

}  // namespace
}  // namespace hydragen::testing
