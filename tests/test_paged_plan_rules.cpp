// The plan builder's rules at the shapes they were measured at (CPU, in CI): how far shared and
// suffix work is split, where stacking is folded back, and how many rows a suffix item holds.
// The plans' coverage of every key: test_paged_plan.cpp.
#include <gtest/gtest.h>

#include <tuple>
#include <utility>

#include "plan/paged_plan.h"
#include "paged_test_util.h"
#include "hydragen/error.h"

namespace hydragen::plan {
namespace {

TEST(PagedPlan, SharedSplitsFollowTheirMinimumLength) {
  // 32 sequences x 4 rows under one 1K segment: 8 shared items before splitting.
  PagedLayout layout;
  layout.page_size = 64, layout.kv_heads = 8, layout.q_heads = 32, layout.head_dim = 128;
  layout.segments.push_back({kNoParent, 1024, std::vector<std::int32_t>(16, 0)});
  for (int s = 0; s < 32; ++s) layout.sequences.push_back({0, 1, {s + 16}, 1});
  auto pieces_per_item = [](const AttentionPlan& plan, int expected_items) {
    EXPECT_EQ(plan.shared_items.size(), static_cast<std::size_t>(expected_items));
    int pieces_of_head0 = 0;
    for (const PlanItem& it : plan.shared_items) {
      EXPECT_EQ(it.piece_count, plan.shared_items[0].piece_count);
      if (it.kv_head == 0) pieces_of_head0 += it.piece_count;
    }
    EXPECT_EQ(pieces_of_head0, 16);  // every page of the segment, once per kv head
    return plan.shared_items.empty() ? 0 : plan.shared_items[0].piece_count;
  };
  PlanOptions options;
  // Default: a 1K segment is short (< 8 x 512), so 8 pieces of 128 keys.
  EXPECT_EQ(pieces_per_item(build_attention_plan(layout, options), 64), 2);
  // Short splits at 512 too: 2 pieces of 512 keys.
  options.shared_short_split_tokens = 512;
  EXPECT_EQ(pieces_per_item(build_attention_plan(layout, options), 16), 8);
  // Suffixes of 256 (more than a quarter of the segment): no short splits either.
  options = PlanOptions{};
  layout.sequences[3].suffix_tokens = 256;
  layout.sequences[3].pages = {3 + 16, 100, 101, 102};
  EXPECT_EQ(pieces_per_item(build_attention_plan(layout, options), 16), 8);
  layout.sequences[3].suffix_tokens = 256 - 1;  // a quarter less one: short splits again
  EXPECT_EQ(pieces_per_item(build_attention_plan(layout, options), 64), 2);
  layout.sequences[3] = {0, 1, {3 + 16}, 1};
  // A 4K segment is not short: its pieces stay at >= 512 keys (8 splits of 8 pages).
  options = PlanOptions{};
  layout.segments[0] = {kNoParent, 4096, std::vector<std::int32_t>(64, 0)};
  for (int s = 0; s < 32; ++s) layout.sequences[s].pages = {s + 64};
  {
    const AttentionPlan plan = build_attention_plan(layout, options);
    ASSERT_FALSE(plan.shared_items.empty());
    for (const PlanItem& it : plan.shared_items) EXPECT_GE(it.piece_count, 8);
  }
  // An explicit floor of 128 everywhere splits it further.
  options.shared_min_split_tokens = 128;
  {
    const AttentionPlan plan = build_attention_plan(layout, options);
    for (const PlanItem& it : plan.shared_items) EXPECT_LT(it.piece_count, 8);
  }
  options.shared_min_split_tokens = 0;
  EXPECT_THROW(build_attention_plan(layout, options), Error);
  options = PlanOptions{};
  options.shared_short_split_tokens = 0;
  EXPECT_THROW(build_attention_plan(layout, options), Error);
}

// B sequences under one segment of `prefix` tokens with `suffix` own tokens each, planned with
// the H200's slots (264 shared, 1584 suffix); returns how many segments the plan stacks.
int stacked_segments_of(int batch, int kv_heads, int q_heads, std::int64_t prefix, std::int64_t suffix,
                        bool fold_rule = true) {
  const PagedLayout layout = testing::one_segment_layout(batch, kv_heads, q_heads, prefix, suffix);
  PlanOptions options;
  options.shared_slots = 264, options.suffix_slots = 1584;
  options.fold_when_stacking_saves_little = fold_rule;
  const AttentionPlan plan = build_attention_plan(layout, options);
  if (plan.stacked_segments == 0) {  // folded: exactly paged's plan, so paged's time
    options.mode = AttentionMode::paged;
    const AttentionPlan paged = build_attention_plan(layout, options);
    auto same = [](const auto& a, const auto& b) {
      return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0);
    };
    EXPECT_TRUE(same(plan.pages, paged.pages) && same(plan.pieces, paged.pieces) && same(plan.rows, paged.rows) &&
                same(plan.shared_items, paged.shared_items) && same(plan.suffix_items, paged.suffix_items) &&
                same(plan.groups, paged.groups) && plan.state_entries == paged.state_entries)
        << "B=" << batch << " prefix " << prefix << " suffix " << suffix << ": folded plan differs from paged's";
  }
  return plan.stacked_segments;
}

// The fold rule on the issue-3 sweep's shapes: the three points where stacking ran 1.12-1.18x
// paged's time on the H200 fold; every measured point where stacking won stays stacked.
TEST(PagedPlan, FoldsWhereStackingDoesNotShortenTheSuffixLaunch) {
  EXPECT_EQ(stacked_segments_of(16, 1, 8, 1024, 256), 0);
  EXPECT_EQ(stacked_segments_of(64, 1, 8, 1024, 256), 0);
  EXPECT_EQ(stacked_segments_of(16, 8, 32, 1024, 256), 0);
  EXPECT_EQ(stacked_segments_of(16, 1, 8, 1024, 256, false), 1);  // the rule off
  EXPECT_EQ(stacked_segments_of(256, 1, 8, 1024, 256), 1);   // stacked 0.65x paged
  EXPECT_EQ(stacked_segments_of(1024, 1, 8, 1024, 256), 1);  // 0.37x
  EXPECT_EQ(stacked_segments_of(64, 8, 32, 1024, 256), 1);   // 0.57x
  EXPECT_EQ(stacked_segments_of(64, 1, 8, 4096, 256), 1);    // 0.77x
  EXPECT_EQ(stacked_segments_of(16, 8, 32, 4096, 256), 1);   // 0.56x
  EXPECT_EQ(stacked_segments_of(16, 1, 8, 1024, 1), 1);      // decode steps: 0.44x
  EXPECT_EQ(stacked_segments_of(64, 40, 40, 1024, 64), 1);
  EXPECT_EQ(stacked_segments_of(32, 8, 32, 1024, 128), 1);   // the e2e's last step, 8B B=32 1K
}

// Rows per suffix item under kSuffixTileRowsByRule, on the shapes e8 was measured at (H200:
// 1584 suffix slots), and the rule's edges. Each plan's items all have the one row count
// (RandomTreesReadEveryKeyOnce checks the coverage of plans by rule).
// Options with the H200's slots (264 shared, 1584 suffix) and the rows per suffix item by rule.
PlanOptions rows_by_rule_options(AttentionMode mode) {
  PlanOptions options;
  options.mode = mode;
  options.shared_slots = 264, options.suffix_slots = 1584;
  options.suffix_tile_rows = kSuffixTileRowsByRule;
  return options;
}

int suffix_rows_by_rule(int batch, int kv_heads, int q_heads, std::int64_t prefix, std::int64_t suffix,
                        AttentionMode mode = AttentionMode::hydragen, int query_tokens = 1) {
  PagedLayout layout = testing::one_segment_layout(batch, kv_heads, q_heads, prefix, suffix);
  for (auto& seq : layout.sequences) seq.query_tokens = query_tokens;
  const AttentionPlan plan = build_attention_plan(layout, rows_by_rule_options(mode));
  int rows = -1;
  for (const PlanItem& it : plan.suffix_items) {
    if (rows < 0) rows = it.row_count;
    EXPECT_EQ(it.row_count, rows) << "B=" << batch << " " << q_heads << "/" << kv_heads;
  }
  return rows;
}

TEST(PagedPlan, OneRowSuffixItemsByRule) {
  // Won on the H200: one-key suffixes at any batch, llama-3-8b B=32 decode (64-key suffixes
  // under 1K-16K), B=1 over any context, 8/1 and 32/8 B=16 with 256-key suffixes under a
  // stacked 4K prefix.
  EXPECT_EQ(suffix_rows_by_rule(1024, 8, 32, 16384, 1), 1);
  EXPECT_EQ(suffix_rows_by_rule(1024, 1, 8, 32768, 1), 1);
  EXPECT_EQ(suffix_rows_by_rule(32, 8, 32, 16384, 64), 1);
  EXPECT_EQ(suffix_rows_by_rule(32, 8, 32, 1024, 128), 1);
  EXPECT_EQ(suffix_rows_by_rule(1, 8, 32, 32768, 1, AttentionMode::paged), 1);
  EXPECT_EQ(suffix_rows_by_rule(1, 1, 8, 1024, 1, AttentionMode::paged), 1);
  EXPECT_EQ(suffix_rows_by_rule(64, 1, 8, 4096, 256), 1);
  EXPECT_EQ(suffix_rows_by_rule(16, 8, 32, 4096, 256), 1);
  EXPECT_EQ(suffix_rows_by_rule(16, 8, 32, 16384, 256), 1);
  // Lost: llama-3-8b B=128, 8/1 B=256 and 32/8 B=64 with 256-key suffixes, paged at B=16.
  EXPECT_EQ(suffix_rows_by_rule(128, 8, 32, 16384, 64), 4);
  EXPECT_EQ(suffix_rows_by_rule(256, 1, 8, 32768, 256), 8);
  EXPECT_EQ(suffix_rows_by_rule(64, 8, 32, 4096, 256), 4);
  EXPECT_EQ(suffix_rows_by_rule(16, 8, 32, 1024, 1, AttentionMode::paged), 4);
  // Folded plans (the fold is decided at full tiles first): 32/8 B=16 at 1K and 8/1 B=16 at
  // 4K with 256-key suffixes read 1280 and 4352 own keys per sequence, in full tiles.
  EXPECT_EQ(suffix_rows_by_rule(16, 8, 32, 1024, 256), 4);
  EXPECT_EQ(suffix_rows_by_rule(16, 1, 8, 4096, 256), 8);
  // Not a decode step (two query tokens: a prefill chunk's rows stay tiled), and MHA (one
  // row per item already).
  EXPECT_EQ(suffix_rows_by_rule(1, 8, 32, 1024, 2, AttentionMode::hydragen, 2), 8);
  EXPECT_EQ(suffix_rows_by_rule(64, 40, 40, 1024, 64), 1);

  // The edges: mean own keys 2 (any batch) or 512 (one wave of one-row items), 64 items.
  EXPECT_TRUE(one_row_suffix_items(4096, 8, 4, true, 2 * 4096, 1584));
  EXPECT_FALSE(one_row_suffix_items(4096, 8, 4, true, 2 * 4096 + 1, 1584));
  EXPECT_TRUE(one_row_suffix_items(49, 8, 4, true, 512 * 49, 1584));  // 1568 items
  EXPECT_FALSE(one_row_suffix_items(49, 8, 4, true, 512 * 49 + 1, 1584));
  EXPECT_FALSE(one_row_suffix_items(50, 8, 4, true, 64 * 50, 1584));  // 1600 items
  EXPECT_TRUE(one_row_suffix_items(2, 8, 4, true, 1 << 20, 1584));    // 64 items, any keys
  EXPECT_FALSE(one_row_suffix_items(3, 8, 4, true, 1 << 20, 1584));
  EXPECT_FALSE(one_row_suffix_items(8, 8, 1, true, 8, 1584));  // MHA
  EXPECT_FALSE(one_row_suffix_items(8, 8, 4, false, 8, 1584));
}

// The fold is estimated at full suffix tiles: small GQA batches under 256-key suffixes fold
// (8/1 B=16 at 4K, B=64 at 1K: 8-row items, nothing stacked), B=256 stays stacked; paged plans
// stack nothing.
TEST(PagedPlan, FoldIsEstimatedAtFullTiles) {
  auto plan_of = [](int batch, std::int64_t prefix, AttentionMode mode = AttentionMode::hydragen) {
    return build_attention_plan(testing::one_segment_layout(batch, 1, 8, prefix, 256), rows_by_rule_options(mode));
  };
  for (auto [batch, prefix] : {std::pair{16, std::int64_t{4096}}, std::pair{64, std::int64_t{1024}}}) {
    const AttentionPlan plan = plan_of(batch, prefix);
    EXPECT_EQ(plan.stacked_segments, 0) << "B=" << batch;
    EXPECT_EQ(plan.suffix_items.front().row_count, 8) << "B=" << batch;
  }
  const AttentionPlan wide = plan_of(256, 1024);
  EXPECT_EQ(wide.stacked_segments, 1);
  EXPECT_EQ(wide.suffix_items.front().row_count, 8);
  EXPECT_EQ(plan_of(16, 4096, AttentionMode::paged).stacked_segments, 0);
}

// Splits of each sequence's own keys in a paged (everything folded) plan on the H200's 1056
// decode slots: (suffix items, merge columns per group).
std::pair<std::size_t, int> paged_suffix_split(int batch, int kv_heads, int q_heads, std::int64_t prefix) {
  PlanOptions options = rows_by_rule_options(AttentionMode::paged);
  options.suffix_slots = 1056;
  const AttentionPlan plan =
      build_attention_plan(testing::one_segment_layout(batch, kv_heads, q_heads, prefix, 1), options);
  int columns = 0;
  for (const PlanMergeGroup& g : plan.groups) columns = std::max(columns, g.columns);
  return {plan.suffix_items.size(), columns};
}

TEST(PagedPlan, SuffixSplitsWeighTheirMergeColumns) {
  using P = std::pair<std::size_t, int>;
  // 8/1 B=64 at 16K: one wave of 16 splits, where the fill of the waves alone took a second
  // wave for a 97% full one (2112 items, 33 columns of 8 rows; see perf-notes: Suffix splits).
  EXPECT_EQ(paged_suffix_split(64, 1, 8, 16384), P(1024, 16));
  EXPECT_EQ(paged_suffix_split(64, 1, 8, 32768), P(1024, 16));
  // 8/1 B=16 at 16K: 31 splits (the fill alone: 64).
  EXPECT_EQ(paged_suffix_split(16, 1, 8, 16384), P(496, 31));
  // Where a column costs little against the keys it saves, the splits the fill alone gives:
  // one-row items (B=1 by rule, MHA), 4-row items (32/8), and short contexts.
  for (auto [batch, kv, q, prefix, split] :
       {std::tuple{1, 8, 32, 16384, P(1056, 33)}, {1, 1, 8, 32768, P(512, 64)}, {16, 40, 40, 16384, P(1920, 3)},
        {1, 40, 40, 4096, P(1040, 26)}, {16, 8, 32, 4096, P(1024, 8)}, {64, 1, 8, 1024, P(512, 8)},
        {256, 1, 8, 16384, P(1024, 4)}})
    EXPECT_EQ(paged_suffix_split(batch, kv, q, prefix), split)
        << "B=" << batch << " " << q << "/" << kv << " prefix " << prefix;
  // The floors hold: no split under suffix_min_split_tokens keys, none past kMaxSplits, and
  // none where the unsplit items already fill the slots.
  EXPECT_EQ(paged_suffix_split(64, 1, 8, 1024), P(512, 8));   // 1025 keys / 128 = 8
  EXPECT_EQ(paged_suffix_split(1, 1, 8, 32768).second, kMaxSplits);
  EXPECT_EQ(paged_suffix_split(1024, 1, 8, 16384), P(1024, 1));
}

// The merge launch's work list: each row of each merge group of several suffix items (a split
// suffix), from the group's first item, group by group; nothing for unsplit groups.

}  // namespace
}  // namespace hydragen::plan
