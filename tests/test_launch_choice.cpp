// The CUDA backend's kernel choice (backend/cuda/launch_choice.h): every rule of choose_launch
// and plan_options_for, on plan summaries built from real plans (the shapes the rules were
// measured at) and set by hand at the rules' edges, for an H200-like device and for devices
// without sm_90a code or PDL; the overrides, and the environment's values they parse. Host code
// only: runs in every build, CI included.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <tuple>

#include "backend/cuda/launch_choice.h"
#include "hydragen/error.h"
#include "paged_test_util.h"

namespace hydragen {
namespace {

using cuda::DecodeBuild;
using cuda::Force;
using cuda::KernelOverrides;
using cuda::LaunchChoice;
using cuda::PlanSummary;
using cuda::SharedKernel;
using cuda::SuffixKernel;

// An H200 with sm_90a code (d 128): the kernels' occupancies as the runner measures them.
cuda::DeviceKernels h200() {
  cuda::DeviceKernels d;
  d.sms = 132, d.pdl = true;
  d.mma_blocks_per_sm = 1, d.wgmma_blocks_per_sm = 2, d.ws_blocks_per_sm = 1, d.decode_blocks_per_sm = 3;
  return d;
}
// An A100-like device (sm_80 code only: no wgmma kernels, no PDL), or d 64 anywhere.
cuda::DeviceKernels without_sm90a(bool pdl) {
  cuda::DeviceKernels d = h200();
  d.wgmma_blocks_per_sm = d.ws_blocks_per_sm = 0, d.pdl = pdl;
  return d;
}

// A plan of B sequences under one segment of `context` tokens, `suffix` own tokens each, with
// the H200's slots (264 shared, 1584 suffix).
plan::AttentionPlan one_segment_plan(int batch, int kv_heads, int q_heads, std::int64_t context, std::int64_t suffix,
                                     AttentionMode mode) {
  plan::PlanOptions options;
  options.mode = mode;
  options.shared_slots = 264, options.suffix_slots = 1584;
  return plan::build_attention_plan(testing::one_segment_layout(batch, kv_heads, q_heads, context, suffix), options);
}
PlanSummary summary_of(int batch, int kv_heads, int q_heads, std::int64_t context, std::int64_t suffix,
                       AttentionMode mode) {
  return PlanSummary::of(one_segment_plan(batch, kv_heads, q_heads, context, suffix, mode));
}

LaunchChoice choose(const PlanSummary& s, const KernelOverrides& o = {}) { return cuda::choose_launch(s, h200(), o); }

TEST(LaunchChoice, OverridesParseTheDocumentedValuesOnly) {
  const KernelOverrides unset = cuda::parse_kernel_overrides(nullptr, nullptr);
  EXPECT_FALSE(unset.shared.has_value());
  EXPECT_EQ(unset.pdl, Force::by_rule);
  EXPECT_FALSE(cuda::parse_kernel_overrides("", "").shared.has_value());  // set but empty: as unset
  EXPECT_FALSE(cuda::parse_kernel_overrides("auto", nullptr).shared.has_value());
  EXPECT_EQ(cuda::parse_kernel_overrides("mma", nullptr).shared, SharedKernel::mma);
  EXPECT_EQ(cuda::parse_kernel_overrides("wgmma", nullptr).shared, SharedKernel::wgmma);
  EXPECT_EQ(cuda::parse_kernel_overrides("ws", nullptr).shared, SharedKernel::warp_specialized);
  EXPECT_EQ(cuda::parse_kernel_overrides(nullptr, "1").pdl, Force::on);
  EXPECT_EQ(cuda::parse_kernel_overrides(nullptr, "0").pdl, Force::off);
  auto refused = [](const char* shared, const char* pdl, const std::string& variable) {
    try {
      cuda::parse_kernel_overrides(shared, pdl);
      ADD_FAILURE() << "accepted " << (shared ? shared : "") << " / " << (pdl ? pdl : "");
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(variable), std::string::npos) << e.what();
    }
  };
  for (const char* bad : {"ws-tma", "auto-ws", "ws-pp-tma", "MMA", "v5"}) refused(bad, nullptr, "HYDRAGEN_SHARED_KERNEL=");
  for (const char* bad : {"2", "on", "1 ", "-1"}) refused(nullptr, bad, "HYDRAGEN_PDL=");
}

// What the choice reads, on plans whose counts are known.
TEST(LaunchChoice, PlanSummaryCountsTheSuffixItems) {
  // 40/40 B=64 under a stacked 2K prefix, 64-key suffixes: one-row items of one piece each.
  const PlanSummary a = summary_of(64, 40, 40, 2048, 64, AttentionMode::hydragen);
  EXPECT_EQ(a.suffix_items, 64 * 40);
  EXPECT_EQ(a.suffix_pieces, 64 * 40);
  EXPECT_EQ(a.suffix_keys, 64 * 40 * 64);
  EXPECT_EQ(a.groups, 64 * 40);
  EXPECT_EQ(a.max_rows, 1);
  EXPECT_EQ(a.min_rows, 1);
  EXPECT_TRUE(a.one_row && a.lone_rows);
  EXPECT_GT(a.shared_items, 0);
  // 32/8 B=64 under a stacked 1K prefix, one-key suffixes: 4-row items.
  const PlanSummary b = summary_of(64, 8, 32, 1024, 1, AttentionMode::hydragen);
  EXPECT_EQ(b.suffix_items, 64 * 8);
  EXPECT_EQ(b.suffix_keys, 64 * 8);
  EXPECT_EQ(b.max_rows, 4);
  EXPECT_EQ(b.min_rows, 4);
  EXPECT_FALSE(b.one_row || b.lone_rows);
  // A split suffix: one-row items, not alone in their merge groups; its split rows.
  const PlanSummary c = summary_of(1, 40, 40, 32768, 1, AttentionMode::paged);
  EXPECT_TRUE(c.one_row);
  EXPECT_FALSE(c.lone_rows);
  EXPECT_GT(c.suffix_items, c.groups);
  EXPECT_EQ(c.suffix_keys, 40 * (32768 + 1));
  EXPECT_GT(c.split_rows, 0);
  EXPECT_FALSE(c.split_multi_row);
  EXPECT_EQ(c.shared_items, 0);
  const PlanSummary split = summary_of(64, 1, 8, 16384, 1, AttentionMode::dense);
  EXPECT_EQ(split.split_rows, 64 * 8);  // every row of the 64 sequences' split groups
  EXPECT_TRUE(split.split_multi_row);
  const PlanSummary none = PlanSummary::of(plan::AttentionPlan{});
  EXPECT_EQ(none.suffix_items, 0);
  EXPECT_EQ(none.min_rows, 0);
  EXPECT_TRUE(none.one_row && none.lone_rows);  // vacuously
}

// The decode kernel's builds: narrow for one-row items that are few or short, the one-path
// build the rows fit (3-4: four, 5-8: eight), else general; a forced build where it fits.
TEST(LaunchChoice, DecodeBuildByRowsAndItems) {
  EXPECT_EQ(cuda::decode_build_rule(summary_of(64, 40, 40, 2048, 64, AttentionMode::hydragen)), DecodeBuild::narrow);
  EXPECT_EQ(cuda::decode_build_rule(summary_of(64, 8, 32, 1024, 1, AttentionMode::hydragen)), DecodeBuild::four);
  EXPECT_EQ(cuda::decode_build_rule(summary_of(64, 4, 32, 1024, 1, AttentionMode::hydragen)), DecodeBuild::eight);
  // 40/40 B=1024 over 1K contexts, paged: 40960 items of 17 pieces, the general build.
  const PlanSummary long_items = summary_of(1024, 40, 40, 1024, 1, AttentionMode::paged);
  EXPECT_GT(long_items.suffix_items, cuda::kNarrowMostItems);
  EXPECT_EQ(cuda::decode_build_rule(long_items), DecodeBuild::general);
  // The same items with <= 2 pieces each, or few of them: narrow.
  PlanSummary short_items = long_items;
  short_items.suffix_pieces = 2 * short_items.suffix_items;
  EXPECT_EQ(cuda::decode_build_rule(short_items), DecodeBuild::narrow);
  PlanSummary few = long_items;
  few.suffix_items = cuda::kNarrowMostItems;
  EXPECT_EQ(cuda::decode_build_rule(few), DecodeBuild::narrow);
  // Mixed widths and two-row items: general.
  auto rows_between = [](int min_rows, int max_rows) {
    PlanSummary s;
    s.suffix_items = s.groups = s.suffix_pieces = 10;
    s.min_rows = min_rows, s.max_rows = max_rows, s.one_row = s.lone_rows = false;
    return s;
  };
  EXPECT_EQ(cuda::decode_build_rule(rows_between(4, 8)), DecodeBuild::general);
  EXPECT_EQ(cuda::decode_build_rule(rows_between(2, 4)), DecodeBuild::general);
  EXPECT_EQ(cuda::decode_build_rule(rows_between(2, 2)), DecodeBuild::general);
  EXPECT_EQ(cuda::decode_build_rule(rows_between(3, 3)), DecodeBuild::four);
  EXPECT_EQ(cuda::decode_build_rule(rows_between(5, 7)), DecodeBuild::eight);
  EXPECT_EQ(cuda::decode_build_rule(PlanSummary{}), DecodeBuild::narrow);  // no items: one row each, vacuously

  // Through choose_launch, forced: general anywhere, the others where the rows fit.
  KernelOverrides forced;
  forced.suffix = SuffixKernel::decode;  // (the quad kernel would take the lone one-row items)
  for (const DecodeBuild build : {DecodeBuild::general, DecodeBuild::narrow, DecodeBuild::four, DecodeBuild::eight}) {
    forced.decode_build = build;
    EXPECT_EQ(choose(long_items, forced).decode_build, build == DecodeBuild::narrow ? build : DecodeBuild::general);
    EXPECT_EQ(choose(rows_between(3, 4), forced).decode_build,
              build == DecodeBuild::general || build == DecodeBuild::four ? build : DecodeBuild::four);
    EXPECT_EQ(choose(rows_between(6, 8), forced).decode_build,
              build == DecodeBuild::general || build == DecodeBuild::eight ? build : DecodeBuild::eight);
  }
}

// The quad kernel: lone one-row items of one or two keys at any batch, up to kQuadMaxMeanKeys
// keys with >= kQuadManyItems items; not GQA rows, split contexts or long suffixes.
TEST(LaunchChoice, QuadKernelServesShortLoneOneRowItems) {
  auto suffix_of = [](int batch, int kv_heads, int q_heads, std::int64_t context, std::int64_t suffix,
                      AttentionMode mode = AttentionMode::hydragen) {
    return choose(summary_of(batch, kv_heads, q_heads, context, suffix, mode)).suffix;
  };
  EXPECT_EQ(suffix_of(1024, 40, 40, 16384, 1), SuffixKernel::quad);
  EXPECT_EQ(suffix_of(64, 40, 40, 2048, 2), SuffixKernel::quad);
  EXPECT_EQ(suffix_of(64, 40, 40, 2048, 3), SuffixKernel::decode);
  EXPECT_EQ(suffix_of(1024, 40, 40, 2048, 3), SuffixKernel::quad);
  EXPECT_EQ(suffix_of(256, 40, 40, 2048, cuda::kQuadMaxMeanKeys), SuffixKernel::quad);  // 10240 items
  EXPECT_EQ(suffix_of(128, 40, 40, 2048, 8), SuffixKernel::decode);                    // 5120 items
  EXPECT_EQ(suffix_of(1024, 40, 40, 2048, cuda::kQuadMaxMeanKeys + 1), SuffixKernel::decode);
  EXPECT_EQ(suffix_of(1024, 40, 40, 1024, 1, AttentionMode::paged), SuffixKernel::decode);
  EXPECT_EQ(suffix_of(64, 8, 32, 1024, 1), SuffixKernel::decode);                     // GQA rows
  EXPECT_EQ(suffix_of(1, 40, 40, 32768, 1, AttentionMode::paged), SuffixKernel::decode);  // split
  EXPECT_FALSE(cuda::quad_rule(PlanSummary{}));
  // Forced: quad wherever the items are lone one-row items, the decode kernel anywhere.
  KernelOverrides o;
  o.suffix = SuffixKernel::quad;
  EXPECT_EQ(choose(summary_of(1024, 40, 40, 1024, 1, AttentionMode::paged), o).suffix, SuffixKernel::quad);
  EXPECT_EQ(choose(summary_of(64, 8, 32, 1024, 1, AttentionMode::hydragen), o).suffix, SuffixKernel::decode);
  EXPECT_EQ(choose(PlanSummary{}, o).suffix, SuffixKernel::decode);
  o.suffix = SuffixKernel::decode;
  EXPECT_EQ(choose(summary_of(1024, 40, 40, 16384, 1, AttentionMode::hydragen), o).suffix, SuffixKernel::decode);
  // The quad kernel merges in itself: no merge launch, whatever is forced.
  o.suffix = SuffixKernel::quad, o.merge_launch = Force::on;
  EXPECT_FALSE(choose(summary_of(1024, 40, 40, 16384, 1, AttentionMode::hydragen), o).merge_launch);
}

// The merge launch: where a split group has two rows or more, with at least
// kMergeLaunchMinColumnsStacked columns under a shared launch; not for one-row groups (B=1,
// MHA); forced on for any split, off never.
TEST(LaunchChoice, MergeLaunchWhereASuffixIsSplit) {
  const PlanSummary unsplit = summary_of(1024, 8, 32, 16384, 1, AttentionMode::hydragen);
  const PlanSummary split = summary_of(64, 1, 8, 16384, 1, AttentionMode::dense);
  const PlanSummary one_row = summary_of(1, 40, 40, 16384, 1, AttentionMode::paged);
  EXPECT_EQ(unsplit.split_rows, 0);
  PlanSummary stacked = split, narrow = split;
  stacked.shared_items = narrow.shared_items = 100;
  stacked.max_columns = cuda::kMergeLaunchMinColumnsStacked;
  narrow.max_columns = cuda::kMergeLaunchMinColumnsStacked - 1;
  EXPECT_FALSE(cuda::merge_launch_rule(unsplit));
  EXPECT_TRUE(cuda::merge_launch_rule(split));
  EXPECT_FALSE(cuda::merge_launch_rule(one_row));
  EXPECT_TRUE(cuda::merge_launch_rule(stacked));
  EXPECT_FALSE(cuda::merge_launch_rule(narrow));
  EXPECT_TRUE(choose(split).merge_launch);
  EXPECT_TRUE(choose(split).merge_after_decode);  // (PDL on the H200)
  EXPECT_FALSE(cuda::choose_launch(split, without_sm90a(false), {}).merge_after_decode);
  KernelOverrides o;
  o.merge_launch = Force::on;
  EXPECT_FALSE(choose(unsplit, o).merge_launch);  // nothing to merge
  EXPECT_TRUE(choose(one_row, o).merge_launch);
  EXPECT_TRUE(choose(narrow, o).merge_launch);
  o.merge_launch = Force::off;
  EXPECT_FALSE(choose(split, o).merge_launch);
}

// The suffix launch follows the shared one as its programmatic dependent only where the shared
// items leave at least half of the SMs idle (the H200's 132 here); forced on or off; never on
// a device without PDL.
TEST(LaunchChoice, PdlOnlyWhereTheSharedLaunchLeavesHalfTheSmsIdle) {
  EXPECT_TRUE(cuda::pdl_rule(64, 1, 132));    // llama-3-8b B=32 1K: 64 items of the one-per-SM kernel
  EXPECT_TRUE(cuda::pdl_rule(66, 1, 132));
  EXPECT_FALSE(cuda::pdl_rule(67, 1, 132));
  EXPECT_FALSE(cuda::pdl_rule(128, 1, 132));  // B=32 16K: the SMs are full
  EXPECT_TRUE(cuda::pdl_rule(132, 2, 132));   // two blocks per SM: 66 SMs busy
  EXPECT_FALSE(cuda::pdl_rule(133, 2, 132));
  EXPECT_FALSE(cuda::pdl_rule(0, 1, 132));    // no shared launch
  PlanSummary s;
  s.shared_items = 132;  // two blocks per SM of the wgmma kernel: 66 SMs busy
  EXPECT_TRUE(choose(s).suffix_after_shared);
  s.shared_full_tiles = true;  // the warp-specialized kernel, one block per SM: all busy
  EXPECT_FALSE(choose(s).suffix_after_shared);
  KernelOverrides o;
  o.pdl = Force::on;
  EXPECT_TRUE(choose(s, o).suffix_after_shared);
  EXPECT_FALSE(cuda::choose_launch(s, without_sm90a(false), o).suffix_after_shared);
  s.shared_full_tiles = false;
  o.pdl = Force::off;
  const LaunchChoice off = choose(s, o);
  EXPECT_FALSE(off.suffix_after_shared || off.merge_after_decode || off.shared_after_previous);
}

// The shared kernel: the wgmma kernel on sm_90a at d 128, the warp-specialized one for plans
// of full tiles (it may then start under the launch that writes q), the mma.sync kernel
// elsewhere; a forced kernel for every plan, refused where the device has none.
TEST(LaunchChoice, SharedKernelByDeviceAndTiles) {
  PlanSummary s;
  s.shared_items = 500;
  EXPECT_EQ(choose(s).shared, SharedKernel::wgmma);
  EXPECT_FALSE(choose(s).shared_after_previous);
  s.shared_full_tiles = true;
  EXPECT_EQ(choose(s).shared, SharedKernel::warp_specialized);
  EXPECT_TRUE(choose(s).shared_after_previous);
  EXPECT_EQ(cuda::choose_launch(s, without_sm90a(true), {}).shared, SharedKernel::mma);
  for (const SharedKernel forced : {SharedKernel::mma, SharedKernel::wgmma, SharedKernel::warp_specialized}) {
    KernelOverrides o;
    o.shared = forced;
    for (const bool full : {false, true}) {
      s.shared_full_tiles = full;
      EXPECT_EQ(choose(s, o).shared, forced);
    }
  }
  KernelOverrides ws;
  ws.shared = SharedKernel::warp_specialized;
  EXPECT_THROW(cuda::choose_launch(s, without_sm90a(true), ws), Error);
  KernelOverrides mma;
  mma.shared = SharedKernel::mma;
  EXPECT_EQ(cuda::choose_launch(s, without_sm90a(true), mma).shared, SharedKernel::mma);
}

// Plan options for the device's kernels: the slots of its shared kernel (split past one wave
// for the wgmma kernels), the warp-specialized kernel's slots and head splits by rule, the
// decode kernel's item slots, one-row suffix items by rule.
TEST(LaunchChoice, PlanOptionsFollowTheDeviceKernels) {
  const plan::PlanOptions o = cuda::plan_options_for(h200(), AttentionMode::paged, false, {});
  EXPECT_EQ(o.mode, AttentionMode::paged);
  EXPECT_FALSE(o.causal);
  EXPECT_EQ(o.shared_slots, 264);
  EXPECT_TRUE(o.shared_split_past_one_wave);
  EXPECT_EQ(o.shared_full_tile_slots, 132);
  EXPECT_TRUE(o.shared_head_splits);
  EXPECT_EQ(o.suffix_slots, 132 * 3 * cuda::kDecodeItemsPerBlock);
  EXPECT_EQ(o.suffix_tile_rows, plan::kSuffixTileRowsByRule);
  EXPECT_EQ(o.shared_tile_rows, plan::kSharedTileRows);
  const plan::PlanOptions a100 = cuda::plan_options_for(without_sm90a(false), AttentionMode::hydragen, true, {});
  EXPECT_EQ(a100.shared_slots, 132);
  EXPECT_FALSE(a100.shared_split_past_one_wave);
  EXPECT_EQ(a100.shared_full_tile_slots, 0);
  EXPECT_FALSE(a100.shared_head_splits);
  // Forced: every plan split for that kernel's blocks, no full-tile split.
  KernelOverrides forced;
  for (const auto [kernel, slots, past_one_wave] :
       {std::tuple{SharedKernel::mma, 132, false}, {SharedKernel::wgmma, 264, true}, {SharedKernel::warp_specialized, 132, true}}) {
    forced.shared = kernel;
    const plan::PlanOptions f = cuda::plan_options_for(h200(), AttentionMode::hydragen, true, forced);
    EXPECT_EQ(f.shared_slots, slots);
    EXPECT_EQ(f.shared_split_past_one_wave, past_one_wave);
    EXPECT_EQ(f.shared_full_tile_slots, 0);
    EXPECT_FALSE(f.shared_head_splits);
  }
  forced.shared = SharedKernel::wgmma;
  EXPECT_THROW(cuda::plan_options_for(without_sm90a(true), AttentionMode::hydragen, true, forced), Error);
}

// CUDA graphs are keyed by LaunchChoice::key: distinct choices, distinct keys.
TEST(LaunchChoice, KeysTellEveryChoiceApart) {
  std::set<int> keys;
  int choices = 0;
  for (const SharedKernel shared : {SharedKernel::mma, SharedKernel::wgmma, SharedKernel::warp_specialized})
    for (const SuffixKernel suffix : {SuffixKernel::decode, SuffixKernel::quad})
      for (const DecodeBuild build : {DecodeBuild::general, DecodeBuild::narrow, DecodeBuild::four, DecodeBuild::eight})
        for (int flags = 0; flags < 16; ++flags) {
          LaunchChoice c;
          c.shared = shared, c.suffix = suffix, c.decode_build = build;
          c.merge_launch = flags & 1, c.suffix_after_shared = flags & 2, c.merge_after_decode = flags & 4;
          c.shared_after_previous = flags & 8;
          keys.insert(c.key());
          ++choices;
        }
  EXPECT_EQ(static_cast<int>(keys.size()), choices);
}

}  // namespace
}  // namespace hydragen
