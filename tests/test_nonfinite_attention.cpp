// No kernel may turn a NaN into a plausible number: a NaN or infinite attention score makes
// its row NaN (not the empty state, o = 0 and lse = -inf, that merges into finite garbage),
// so a model with a NaN in it fails its request instead of printing tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/online_softmax.h"
#include "engine_test_util.h"
#include "hydragen/error.h"

namespace hydragen {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

TEST(NonFiniteAttention, NanScoresMakeTheRowNanNotEmpty) {
  constexpr std::int64_t d = 4, keys = 300;  // two key blocks
  std::vector<float> k(keys * d), v(keys * d);
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = 0.01f * static_cast<float>(i % 17), v[i] = 0.1f * (i % 5);
  for (float poison : {kNan, std::numeric_limits<float>::infinity()}) {
    // A poisoned query: every score of its row is NaN (or infinite); the other rows keep theirs.
    cpu::OnlineSoftmaxTile tile(3, d);
    for (std::int64_t r = 0; r < 3; ++r)
      for (std::int64_t j = 0; j < d; ++j) tile.query(r)[j] = 0.5f;
    tile.query(1)[2] = poison;
    tile.attend(k.data(), d, v.data(), d, keys);
    tile.finish();
    for (std::int64_t j = 0; j < d; ++j) {
      EXPECT_TRUE(std::isfinite(tile.output(0)[j]) && std::isfinite(tile.output(2)[j])) << poison;
      EXPECT_TRUE(std::isnan(tile.output(1)[j])) << poison;
    }
    EXPECT_TRUE(std::isfinite(tile.lse(0)));
    EXPECT_TRUE(std::isnan(tile.lse(1)));
    // A poisoned key in the second block, after a finite first block: every row is NaN.
    cpu::OnlineSoftmaxTile rows(2, d);
    for (std::int64_t r = 0; r < 2; ++r)
      for (std::int64_t j = 0; j < d; ++j) rows.query(r)[j] = 0.5f;
    std::vector<float> poisoned = k;
    poisoned[(keys - 3) * d + 1] = poison;
    rows.attend(poisoned.data(), d, v.data(), d, keys);
    rows.finish();
    for (std::int64_t r = 0; r < 2; ++r) {
      EXPECT_TRUE(std::isnan(rows.lse(r))) << poison;
      for (std::int64_t j = 0; j < d; ++j) EXPECT_TRUE(std::isnan(rows.output(r)[j])) << poison;
    }
  }
}

// A NaN in a weight (here placed after load, which refuses it) never comes out as tokens, in
// any attention mode: the run ends in an error.
TEST(NonFiniteAttention, NanWeightNeverGivesTokens) {
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    test::FixtureModel m = test::load_fixture_model("tiny-llama");
    m.weights.layers[0].wq.data<float>()[5 * m.config.hidden_size + 3] = kNan;  // row 5: head 0's q
    engine::RunnerOptions options;
    options.kv_pages = 16;
    auto runner = engine::make_cpu_runner(m.config, std::move(m.weights), options);
    engine::Engine engine(*runner, test::with(mode));
    const std::vector<engine::GenerationRequest> requests{test::greedy_request({1, 17, 289, 45, 3}, 4, 2)};
    bool produced_tokens = false;
    try {
      for (const engine::Completion& c : engine.generate(requests)) produced_tokens |= c.error.empty();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(produced_tokens) << mode_name(mode);
  }
}

}  // namespace
}  // namespace hydragen
