// The host plan builder of the paged attention kernels (runs on the CPU, in CI): every
// query row must read each key of its context exactly once, from the pool slot that holds it
// (segments may start inside a page), across the shared items that stack its ancestors and
// its own suffix items; every partial-state column it merges must be written exactly once.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "plan/paged_plan.h"
#include "paged_test_util.h"
#include "hydragen/error.h"

namespace hydragen::plan {
namespace {

// A random tree laid out in pages; page ids are just counted up. Segments start at a random
// slot of their first page (half of them at 0), a quarter of the suffixes too.
PagedLayout random_layout(std::mt19937& rng, int segments, int sequences, int page_size, int hkv, int g) {
  PagedLayout layout;
  layout.page_size = page_size, layout.kv_heads = hkv, layout.q_heads = hkv * g, layout.head_dim = 64;
  int next_page = 0;
  auto pages_for = [&](std::int64_t slots) {
    std::vector<std::int32_t> pages;
    for (std::int64_t t = 0; t < slots; t += page_size) pages.push_back(next_page++);
    return pages;
  };
  const std::int64_t lengths[] = {0, 1, 7, 64, 65, 513, 2000};
  for (int i = 0; i < segments; ++i) {
    const std::int64_t len = lengths[rng() % 7];
    const int parent = i == 0 ? kNoParent : static_cast<int>(rng() % i);
    const auto first_slot = static_cast<std::int32_t>(rng() % 2 ? rng() % page_size : 0);
    layout.segments.push_back({parent, len, pages_for(first_slot + len), first_slot});
  }
  for (int s = 0; s < sequences; ++s) {
    const std::int64_t len = lengths[rng() % 6] + 3;
    const int parent = segments == 0 ? kNoParent : static_cast<int>(rng() % segments);
    // Suffixes start at slot 0, except a few (the engine's prefill of a node split mid-page).
    const auto first_slot = static_cast<std::int32_t>(rng() % 4 == 0 ? rng() % page_size : 0);
    layout.sequences.push_back({parent, len, pages_for(first_slot + len), 1 + static_cast<int>(rng() % 3), first_slot});
  }
  return layout;
}

// The pool slot (page * page_size + offset) of slot `slot` of a page list.
std::int64_t pool_slot(const std::vector<std::int32_t>& pages, std::int64_t slot, int page_size) {
  return std::int64_t{pages.at(slot / page_size)} * page_size + slot % page_size;
}

void check_coverage(const PagedLayout& layout, const AttentionPlan& plan) {
  const int hkv = layout.kv_heads, g = layout.q_heads / hkv, ps = layout.page_size;
  // (kv head, query token, key position) -> reads and the pool slot of the last;
  // (state entry) -> writes.
  std::map<std::tuple<int, int, int>, std::pair<int, std::int64_t>> reads;
  std::map<std::int64_t, int> writes;
  auto visit = [&](const std::vector<PlanItem>& items) {
    for (const PlanItem& it : items) {
      ASSERT_LE(it.row_count, it.group < 0 ? 128 : kSuffixTileRows);
      for (int r = 0; r < it.row_count; ++r) {
        const PlanRow& row = plan.rows[it.row_begin + r];
        ++writes[row.state_base + std::int64_t{it.column} * row.state_stride + it.kv_head * g + row.group];
        if (row.group != 0) continue;
        for (int pi = 0; pi < it.piece_count; ++pi) {
          const PlanPiece& pc = plan.pieces[it.piece_begin + pi];
          ASSERT_GE(pc.tokens, 1);
          ASSERT_LE(pc.tokens, kBlockTokens);
          const bool one_page = pc.token_begin / ps == (pc.token_begin + pc.tokens - 1) / ps;
          for (int k = 0; k < pc.tokens; ++k) {
            const int tok = pc.token_begin + k;
            auto& read = reads[{it.kv_head, row.token, pc.position + k}];
            ++read.first;
            read.second = std::int64_t{plan.pages.at(pc.page_offset + tok / ps)} * ps + tok % ps;
            // The piece's slot: token k at slot + k where the piece is in one page, else -1.
            if (k == 0) ASSERT_EQ(pc.slot, one_page ? read.second : -1) << "piece " << it.piece_begin + pi;
          }
        }
      }
    }
  };
  visit(plan.shared_items);
  visit(plan.suffix_items);
  std::int64_t row = 0, expected_writes = 0;
  for (std::size_t s = 0; s < layout.sequences.size(); ++s) {
    const auto& seq = layout.sequences[s];
    // The pool slot of each context position: path segments (root first), then the suffix.
    std::vector<int> path;
    for (int p = seq.parent; p != kNoParent; p = layout.segments[p].parent) path.insert(path.begin(), p);
    std::vector<std::int64_t> slots;
    for (int p : path) {
      const auto& seg = layout.segments[p];
      for (std::int64_t j = 0; j < seg.tokens; ++j) slots.push_back(pool_slot(seg.pages, seg.first_slot + j, ps));
    }
    for (std::int64_t j = 0; j < seq.suffix_tokens; ++j) slots.push_back(pool_slot(seq.pages, seq.first_slot + j, ps));
    const auto context = static_cast<std::int64_t>(slots.size());
    for (int t = 0; t < seq.query_tokens; ++t, ++row)
      for (int kh = 0; kh < hkv; ++kh)
        for (std::int64_t k = 0; k < context; ++k) {
          auto it = reads.find({kh, static_cast<int>(row), static_cast<int>(k)});
          ASSERT_TRUE(it != reads.end() && it->second.first == 1)
              << "sequence " << s << " token " << t << " kv head " << kh << " key " << k;
          ASSERT_EQ(it->second.second, slots[k]) << "sequence " << s << " key " << k << " read from the wrong slot";
        }
  }
  // Every entry a merge group reads (its rows x its columns, in its kv head) written exactly
  // once, and nothing written that no group reads. (The heads of a sequence may have different
  // column counts: PlanOptions::shared_head_splits; its region holds the widest.)
  std::map<std::int64_t, int> merged;
  for (const PlanItem& it : plan.suffix_items) {
    const PlanMergeGroup& group = plan.groups.at(it.group);
    ASSERT_LE(group.columns, plan.max_columns);
    for (int r = 0; r < it.row_count; ++r) {
      const PlanRow& row = plan.rows[it.row_begin + r];
      for (int c = 0; c < group.columns; ++c)
        merged[row.state_base + std::int64_t{c} * row.state_stride + it.kv_head * g + row.group] += 1;
    }
  }
  for (const auto& group : plan.groups) expected_writes += group.items;
  EXPECT_EQ(expected_writes, static_cast<std::int64_t>(plan.suffix_items.size()));
  for (const auto& [entry, count] : writes) {
    ASSERT_EQ(count, 1) << "state entry " << entry;
    ASSERT_LT(entry, plan.state_entries);
    ASSERT_TRUE(merged.count(entry)) << "state entry " << entry << " is written but no merge group reads it";
  }
  for (const auto& [entry, count] : merged) ASSERT_TRUE(writes.count(entry)) << "state entry " << entry << " is merged unwritten";
  EXPECT_LE(static_cast<std::int64_t>(writes.size()), plan.state_entries);
  EXPECT_EQ(plan.query_rows, row);
}

TEST(PagedPlan, RandomTreesReadEveryKeyOnce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int page_size = trial % 2 ? 16 : 64;
    PagedLayout layout = random_layout(rng, 1 + trial % 6, 1 + static_cast<int>(rng() % 40), page_size,
                                       1 + trial % 3, 1 + trial % 4);
    for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged}) {
      PlanOptions options;
      options.mode = mode;
      options.shared_slots = options.suffix_slots = trial % 3 == 0 ? 1 : 300;  // with and without split-KV
      options.shared_tile_rows = trial % 2 ? 64 : 128;
      options.shared_split_past_one_wave = trial % 4 == 1;
      options.suffix_tile_rows = trial % 5 == 2 ? 1 : trial % 5 == 3 ? 5 : trial % 5 == 4 ? kSuffixTileRowsByRule : kSuffixTileRows;
      if (trial % 3 == 1) {  // full-tile plans on 7 slots, their heads split differently where that balances
        options.shared_full_tile_slots = 7;
        options.shared_head_splits = true;
      }
      const AttentionPlan plan = build_attention_plan(layout, options);
      if (mode == AttentionMode::paged) {
        EXPECT_TRUE(plan.shared_items.empty());
      }
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " mode " << mode_name(mode) << " suffix tile rows "
                                        << options.suffix_tile_rows);
      for (const PlanItem& it : plan.suffix_items)
        ASSERT_LE(it.row_count, options.suffix_tile_rows == kSuffixTileRowsByRule ? kSuffixTileRows : options.suffix_tile_rows);
      check_coverage(layout, plan);
    }
  }
}

// 6 shared items (3 kv heads x 2 row tiles) on 5 slots: one split unless asked to fill the
// second wave, then 4 (24 items on 25 slots).
TEST(PagedPlan, SplitsSharedWorkPastOneWaveWhenAsked) {
  PagedLayout layout;
  layout.page_size = 64, layout.kv_heads = 3, layout.q_heads = 3, layout.head_dim = 128;
  std::vector<std::int32_t> pages(32);
  for (int i = 0; i < 32; ++i) pages[i] = i;
  layout.segments.push_back({kNoParent, 2048, pages});
  for (int s = 0; s < 130; ++s) layout.sequences.push_back({0, 3, {32 + s}, 1});
  PlanOptions options;
  options.shared_slots = 5;
  EXPECT_EQ(build_attention_plan(layout, options).shared_items.size(), 6u);
  options.shared_split_past_one_wave = true;
  const AttentionPlan plan = build_attention_plan(layout, options);
  EXPECT_EQ(plan.shared_items.size(), 24u);
  check_coverage(layout, plan);
}

// shared_head_splits: the closed-form cost of the full-tile kernel's rounds against a
// simulation that deals the items to blocks one by one (item i to block i % slots: the bulk
// heads' items, then the tail's), over shapes from 2 to 40 kv heads and 4 to 132 slots. The
// result is the uniform split or a bulk of whole rounds + a finer tail, >= 2% cheaper than
// uniform, and no candidate of the search is cheaper under the simulation. Then the shapes it
// was written for: 40/40 at B=1024 (33 heads whole, the other 7 split 7 ways at 16K, 2 ways at
// 2K) and B=256 (33 split 2, 7 split 8); 32/8 at B=1024 (one head per 32 tiles: nothing to
// balance) and one kv head unchanged.
TEST(PagedPlan, HeadSplitsFillTheFullTileKernelsRounds) {
  auto simulated = [](const std::vector<int>& splits, std::int64_t tiles, std::int64_t pieces,
                      std::int64_t rows_per_head, int slots) {
    std::vector<double> load(static_cast<std::size_t>(slots), 0.0);
    std::int64_t item = 0;
    double columns = 0;
    for (int k : splits) {
      columns += k;
      for (std::int64_t t = 0; t < tiles; ++t)
        for (int sp = 0; sp < k; ++sp) {
          const std::int64_t item_pieces = (pieces + k - 1) / k;  // the longest split (ceil)
          load[static_cast<std::size_t>(item++ % slots)] += double((item_pieces + 1) / 2) + kHeadSplitItemOverheadBlocks;
        }
    }
    return *std::max_element(load.begin(), load.end()) + kHeadSplitBlocksPerColumnRow * columns * double(rows_per_head);
  };
  int changed = 0;
  for (int heads : {2, 3, 5, 6, 7, 8, 40})
    for (std::int64_t tiles : {1, 2, 8})
      for (std::int64_t pieces : {8, 32, 256})
        for (int slots : {4, 5, 7, 132})
          for (int uniform : {1, 2, 3}) {
            const std::int64_t rows = tiles * 128;
            const std::vector<int> got = shared_head_splits(heads, tiles, pieces, rows, slots, uniform);
            SCOPED_TRACE(::testing::Message() << "heads " << heads << " tiles " << tiles << " pieces " << pieces
                                              << " slots " << slots << " uniform " << uniform);
            ASSERT_EQ(got.size(), static_cast<std::size_t>(heads));
            const std::vector<int> flat(static_cast<std::size_t>(heads), uniform);
            const double base = simulated(flat, tiles, pieces, rows, slots);
            const int most = static_cast<int>(std::min<std::int64_t>(kMostHeadSplits, std::max<std::int64_t>(1, pieces / 2)));
            // The best candidate under the simulation.
            double best = base;
            for (int k_bulk = 1; k_bulk <= std::min(most, 4); ++k_bulk)
              for (int k_tail = k_bulk + 1; k_tail <= most; ++k_tail)
                for (int bulk = 1; bulk < heads; ++bulk) {
                  if (std::int64_t{bulk} * tiles * k_bulk % slots != 0) continue;
                  std::vector<int> candidate(static_cast<std::size_t>(heads), k_tail);
                  std::fill_n(candidate.begin(), bulk, k_bulk);
                  best = std::min(best, simulated(candidate, tiles, pieces, rows, slots));
                }
            if (got == flat) {
              EXPECT_GT(best, 0.98 * base - 1e-9) << "a candidate >= 2% cheaper was not taken";
              continue;
            }
            ++changed;
            const int bulk = static_cast<int>(std::find(got.begin(), got.end(), got.back()) - got.begin());
            ASSERT_GT(bulk, 0);
            for (int kh = 0; kh < heads; ++kh) ASSERT_EQ(got[kh], kh < bulk ? got.front() : got.back()) << "head " << kh;
            EXPECT_LT(got.front(), got.back());
            EXPECT_EQ(std::int64_t{bulk} * tiles * got.front() % slots, 0) << "the bulk fills whole rounds";
            const double cost = simulated(got, tiles, pieces, rows, slots);
            EXPECT_LE(cost, 0.98 * base + 1e-9);
            EXPECT_NEAR(cost, best, 1e-9) << "the closed form's choice is the simulation's best";
          }
  EXPECT_GT(changed, 20);
  auto runs = [](const std::vector<int>& splits) {  // (count, splits) runs
    std::vector<std::pair<int, int>> out;
    for (int k : splits)
      if (!out.empty() && out.back().second == k) ++out.back().first;
      else out.push_back({1, k});
    return out;
  };
  using Runs = std::vector<std::pair<int, int>>;
  EXPECT_EQ(runs(shared_head_splits(40, 8, 256, 1024, 132, 2)), (Runs{{33, 1}, {7, 7}}));
  EXPECT_EQ(runs(shared_head_splits(40, 8, 32, 1024, 132, 2)), (Runs{{33, 1}, {7, 2}}));
  EXPECT_EQ(runs(shared_head_splits(40, 2, 256, 256, 132, 3)), (Runs{{33, 2}, {7, 8}}));
  EXPECT_EQ(runs(shared_head_splits(8, 32, 256, 4096, 132, 1)), (Runs{{8, 1}}));
  EXPECT_EQ(runs(shared_head_splits(1, 8, 256, 1024, 132, 2)), (Runs{{1, 2}}));
}

// The plan of a head-split segment: 6 MHA heads x 2 tiles of 64 rows over a 2K prefix on 5
// full-tile slots. Heads 0-4 whole (10 items: 2 rounds), head 5 split 2 ways (split-major:
// both tiles of a split side by side); each merge group reads its own head's columns (1 or 2
// shared + its suffix split), the state region holds the widest; every key read once.
TEST(PagedPlan, HeadSplitPlansMergeEachHeadsOwnColumns) {
  const PagedLayout layout = testing::one_segment_layout(128, 6, 6, 2048, 3);
  PlanOptions options;
  options.shared_tile_rows = 64, options.shared_slots = 264, options.suffix_slots = 1584;
  options.shared_full_tile_slots = 5, options.shared_split_past_one_wave = true;
  const AttentionPlan uniform = build_attention_plan(layout, options);
  options.shared_head_splits = true;
  const AttentionPlan plan = build_attention_plan(layout, options);
  ASSERT_TRUE(plan.shared_full_tiles);
  EXPECT_EQ(shared_head_splits(6, 2, 32, 128, 5, 2), (std::vector<int>{1, 1, 1, 1, 1, 2}));
  EXPECT_EQ(uniform.shared_items.size(), 24u);  // 12 tiles x 2: the uniform split
  ASSERT_EQ(plan.shared_items.size(), 14u);
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(plan.shared_items[i].kv_head, static_cast<int>(i / 2));
    EXPECT_EQ(plan.shared_items[i].piece_count, 32);
    EXPECT_EQ(plan.shared_items[i].column, 0);
  }
  const int split_of_item[] = {0, 0, 1, 1}, tile_of_item[] = {0, 1, 0, 1};  // split-major
  for (int j = 0; j < 4; ++j) {
    const PlanItem& it = plan.shared_items[10 + static_cast<std::size_t>(j)];
    EXPECT_EQ(it.kv_head, 5);
    EXPECT_EQ(it.column, split_of_item[j]);
    EXPECT_EQ(it.piece_count, 16);
    EXPECT_EQ(it.row_begin, plan.shared_items[0].row_begin + 64 * tile_of_item[j]);
  }
  for (const PlanItem& it : plan.suffix_items) {
    const PlanMergeGroup& g = plan.groups[it.group];
    EXPECT_EQ(it.column, it.kv_head == 5 ? 2 : 1);
    EXPECT_EQ(g.columns, it.kv_head == 5 ? 3 : 2);
  }
  EXPECT_EQ(plan.max_columns, 3);
  check_coverage(layout, plan);
  // Off for several stacked segments, for plans not split for full tiles, and with one kv head.
  options.shared_full_tile_slots = 0;
  EXPECT_EQ(build_attention_plan(layout, options).shared_items.size(), build_attention_plan(layout, [&] {
              PlanOptions o = options;
              o.shared_head_splits = false;
              return o;
            }()).shared_items.size());
}

// PlanOptions::shared_min_split_tokens: 32 sequences of Llama-3-8B's shape (8 kv heads x 128
// rows) under a 1K prefix have 8 shared items on 264 slots; at the default 512 keys they split
// 2 ways, at 128 keys 8 ways (every split a whole number of 64-key pieces, all keys covered).
// PlanOptions::shared_full_tile_slots: a plan whose stacked work is mostly in tiles of more
// than half the tile rows is split for those slots and says so (the CUDA runner then runs its
// warp-specialized kernel, one block per SM); one whose tiles are half empty keeps the
// ordinary slots, and so does every plan when the option is off or nothing is stacked.
TEST(PagedPlan, FullTilePlansSplitForTheirOwnSlots) {
  PlanOptions options;
  options.shared_slots = 264, options.suffix_slots = 1584;  // the H200's, as on the device
  options.shared_split_past_one_wave = true;
  auto plan_of = [&](int batch, int kv_heads, int q_heads, std::int64_t prefix, int full_tile_slots,
                     AttentionMode mode = AttentionMode::hydragen) {
    PlanOptions o = options;
    o.shared_full_tile_slots = full_tile_slots, o.mode = mode;
    return build_attention_plan(testing::one_segment_layout(batch, kv_heads, q_heads, prefix, 1), o);
  };
  // 8/1 B=64 32K: 512 rows = 4 full tiles, split to fill 132 slots instead of 264.
  const AttentionPlan full = plan_of(64, 1, 8, 32768, 132), ordinary = plan_of(64, 1, 8, 32768, 0);
  EXPECT_TRUE(full.shared_full_tiles);
  EXPECT_FALSE(ordinary.shared_full_tiles);
  EXPECT_LE(full.shared_items.size(), 132u);
  EXPECT_GT(full.shared_items.size(), 66u);
  EXPECT_GT(ordinary.shared_items.size(), 132u);
  // 32/8 B=16: 64 rows per kv head, every tile half empty: the ordinary split.
  const AttentionPlan half = plan_of(16, 8, 32, 32768, 132);
  EXPECT_FALSE(half.shared_full_tiles);
  EXPECT_EQ(half.shared_items.size(), plan_of(16, 8, 32, 32768, 0).shared_items.size());
  // 8/1 B=100: 800 rows = 6 full tiles and one of 32 rows: mostly full.
  EXPECT_TRUE(plan_of(100, 1, 8, 8192, 132).shared_full_tiles);
  // MHA B=1024 (1024 rows per head): full; paged folds everything: nothing stacked.
  EXPECT_TRUE(plan_of(1024, 40, 40, 2048, 132).shared_full_tiles);
  const AttentionPlan paged = plan_of(1024, 40, 40, 2048, 132, AttentionMode::paged);
  EXPECT_FALSE(paged.shared_full_tiles);
  EXPECT_TRUE(paged.shared_items.empty());
}

TEST(PagedPlan, MergeRowsListEverySplitGroupRow) {
  for (auto [batch, kv, q, prefix, mode] :
       {std::tuple{64, 1, 8, 16384, AttentionMode::dense}, {16, 8, 32, 4096, AttentionMode::paged},
        {1, 40, 40, 16384, AttentionMode::paged}, {1024, 8, 32, 16384, AttentionMode::hydragen}}) {
    PlanOptions options;
    options.mode = mode;
    options.shared_slots = 264, options.suffix_slots = 1584;
    const AttentionPlan plan = build_attention_plan(testing::one_segment_layout(batch, kv, q, prefix, 1), options);
    std::vector<std::pair<int, int>> want;
    for (std::size_t i = 0; i < plan.suffix_items.size(); ++i) {
      const PlanItem& it = plan.suffix_items[i];
      const PlanMergeGroup& g = plan.groups[static_cast<std::size_t>(it.group)];
      const bool first = i == 0 || plan.suffix_items[i - 1].group != it.group;
      if (g.items > 1 && first)
        for (int r = 0; r < it.row_count; ++r) want.emplace_back(static_cast<int>(i), r);
    }
    std::vector<std::pair<int, int>> got;
    for (const PlanMergeRow& mr : plan.merge_rows) got.emplace_back(mr.item, mr.row);
    EXPECT_EQ(got, want) << "B=" << batch << " " << q << "/" << kv << " prefix " << prefix;
    // Split where the cost rule splits: 8/1 B=64 at 16K (64 groups of 8 rows), 32/8 B=16 at
    // 4K; B=1 MHA one row per kv head; none at B=1024 under a stacked prefix.
    const std::size_t expected = batch == 64 ? 512 : batch == 1024 ? 0 : want.size();
    EXPECT_EQ(got.size(), expected) << "B=" << batch;
    if (batch == 16 || batch == 1) EXPECT_GT(got.size(), 0u) << "B=" << batch;
  }
}

TEST(PagedPlan, StacksOnlySegmentsThatPay) {
  PagedLayout layout;
  layout.page_size = 64, layout.kv_heads = 1, layout.q_heads = 8, layout.head_dim = 128;
  layout.segments.push_back({kNoParent, 1000, std::vector<std::int32_t>(16, 0)});
  layout.segments.push_back({0, 10, {1}});  // short: folded
  layout.sequences.push_back({1, 5, {2}, 1});
  layout.sequences.push_back({1, 5, {3}, 1});
  const AttentionPlan plan = build_attention_plan(layout);
  EXPECT_EQ(plan.stacked_segments, 1);
  layout.sequences.pop_back();  // one reader only: nothing stacked
  EXPECT_EQ(build_attention_plan(layout).stacked_segments, 0);
}

TEST(PagedPlan, CausalLimitsAreContextPositions) {
  PagedLayout layout;
  layout.page_size = 16, layout.kv_heads = 1, layout.q_heads = 1, layout.head_dim = 64;
  layout.segments.push_back({kNoParent, 100, std::vector<std::int32_t>(7, 0)});
  layout.sequences.push_back({0, 20, {1, 2}, 3});
  const AttentionPlan plan = build_attention_plan(layout);
  ASSERT_EQ(plan.rows.size(), 3u);  // folded: one sequence only
  EXPECT_EQ(plan.rows[0].key_limit, 118);
  EXPECT_EQ(plan.rows[2].key_limit, 120);
}

// A segment that starts at slot 5 of its first page (page_size 16): pieces of <= 64 tokens
// from slot 5, spanning pages; a child starting where its parent ends, on the parent's last page.
TEST(PagedPlan, SegmentsStartingInsideAPage) {
  PagedLayout layout;
  layout.page_size = 16, layout.kv_heads = 2, layout.q_heads = 4, layout.head_dim = 64;
  layout.segments.push_back({kNoParent, 130, {10, 11, 12, 13, 14, 15, 16, 17, 18}, 5});  // slots 5 .. 134
  layout.segments.push_back({0, 20, {18, 19}, 7});  // 135 = 8 x 16 + 7: continues page 18
  layout.sequences.push_back({1, 3, {30}, 1});
  layout.sequences.push_back({1, 2, {31}, 2});
  PlanOptions options;
  options.min_segment_tokens_to_stack = 1;
  const AttentionPlan plan = build_attention_plan(layout, options);
  ASSERT_EQ(plan.stacked_segments, 2);
  // Segment 0's pages come first in plan.pages, then segment 1's.
  // Pieces spanning pages have no slot (-1); slots 133-134 lie in page 18 (its slots 5-6).
  const std::vector<PlanPiece> expected = {
      {0, 5, 64, 0, -1}, {0, 69, 64, 64, -1}, {0, 133, 2, 128, 18 * 16 + 5}, {9, 7, 20, 130, -1}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(plan.pieces[i].page_offset, expected[i].page_offset) << "piece " << i;
    EXPECT_EQ(plan.pieces[i].token_begin, expected[i].token_begin) << "piece " << i;
    EXPECT_EQ(plan.pieces[i].tokens, expected[i].tokens) << "piece " << i;
    EXPECT_EQ(plan.pieces[i].position, expected[i].position) << "piece " << i;
    EXPECT_EQ(plan.pieces[i].slot, expected[i].slot) << "piece " << i;
  }
  // Suffix pieces start at slot 0 of their own page, after the segments' context: sequence
  // 0's 3 tokens in page 30.
  EXPECT_EQ(plan.pieces[4].token_begin, 0);
  EXPECT_EQ(plan.pieces[4].position, 150);
  EXPECT_EQ(plan.pieces[4].slot, 30 * 16);
  check_coverage(layout, plan);
  options.mode = AttentionMode::paged;  // folded: the same offsets in each sequence's own read
  check_coverage(layout, build_attention_plan(layout, options));
}

TEST(PagedPlan, RejectsBadLayouts) {
  PagedLayout layout;
  layout.page_size = 64, layout.kv_heads = 2, layout.q_heads = 3, layout.head_dim = 64;
  EXPECT_THROW(build_attention_plan(layout), Error);
  layout.q_heads = 4;
  layout.segments.push_back({1, 0, {}});
  layout.segments.push_back({0, 0, {}});
  EXPECT_THROW(build_attention_plan(layout), Error);  // cycle
  layout.segments = {{kNoParent, 100, {0}}};            // too few pages
  EXPECT_THROW(build_attention_plan(layout), Error);
  layout.segments = {{kNoParent, 100, {0, 1}, 64}};     // first_slot past the page
  EXPECT_THROW(build_attention_plan(layout), Error);
  layout.segments = {{kNoParent, 100, {0, 1}, -1}};
  EXPECT_THROW(build_attention_plan(layout), Error);
  layout.segments = {{kNoParent, 100, {0, 1}, 30}};     // 30 + 100 slots need 3 pages
  try {
    build_attention_plan(layout);
    FAIL() << "2 pages for first_slot 30 + 100 tokens should throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("first_slot 30"), std::string::npos) << e.what();
  }
  layout.segments = {{kNoParent, 100, {0, 1, 2}, 30}};
  EXPECT_NO_THROW(build_attention_plan(layout));
  layout.sequences = {{0, 60, {3}, 1, 10}};  // a suffix from slot 10: 70 slots need 2 pages
  EXPECT_THROW(build_attention_plan(layout), Error);
  layout.sequences = {{0, 60, {3, 4}, 1, 10}};
  EXPECT_NO_THROW(build_attention_plan(layout));
  for (const int rows : {-1, kSuffixTileRows + 1}) {  // suffix items of 1..kSuffixTileRows rows, or 0: by rule
    PlanOptions options;
    options.suffix_tile_rows = rows;
    try {
      build_attention_plan(layout, options);
      FAIL() << "suffix_tile_rows " << rows << " should throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("suffix_tile_rows"), std::string::npos) << e.what();
    }
  }
}

// A segment marked always_stack (the engine's prefill segments, read by a chunk's many rows)
// is stacked in every mode, whatever its readers and length, and the fold rule leaves it so;
// the other segments follow the mode as before.
TEST(PagedPlan, AlwaysStackedSegmentsStackInEveryMode) {
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    PagedLayout layout = testing::one_segment_layout(16, 1, 8, 1024, 256);
    layout.segments.push_back({kNoParent, 10, {900}, 0});  // short, one reader: never stacked by rule
    layout.sequences.push_back({1, 0, {}, 7});             // a prefill chunk's 7 rows
    PlanOptions options;
    options.mode = mode;
    const AttentionPlan by_rule = build_attention_plan(layout, options);
    layout.segments[1].always_stack = true;
    const AttentionPlan forced = build_attention_plan(layout, options);
    EXPECT_EQ(forced.stacked_segments, by_rule.stacked_segments + 1) << static_cast<int>(mode);
    EXPECT_GT(forced.shared_items.size(), by_rule.shared_items.size()) << static_cast<int>(mode);
    if (mode != AttentionMode::hydragen) EXPECT_EQ(by_rule.stacked_segments, 0);
  }
}

}  // namespace
}  // namespace hydragen::plan
