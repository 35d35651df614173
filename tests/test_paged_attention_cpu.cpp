// cpu::run_attention_plan, the CPU twin of the CUDA plan runner, against the float64
// reference on random paged forests: segments starting inside pages, shuffled page ids, empty
// segments and suffixes, GQA, causal multi-token queries, every mode and the dispatch options
// that force stacking, folding and split-KV. Metric: relative_max_error <= 1e-5, no NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "attention_test_util.h"
#include "backend/cpu/paged_attention_cpu.h"
#include "paged_test_util.h"

namespace hydragen::testing {
namespace {

constexpr double kTolerance = 1e-5;

// Runs the plan into NaN-poisoned outputs; returns (o, lse).
AttentionState run_plan(const plan::AttentionPlan& plan, const PagedCase& c, float scale = 0.f) {
  AttentionState out{Tensor::full(c.q.shape(), std::numeric_limits<double>::quiet_NaN(), DType::f32),
                     Tensor::full({c.q.size(0), c.q.size(1)}, std::numeric_limits<double>::quiet_NaN(), DType::f32)};
  cpu::run_attention_plan(plan, c.q, c.k_pool, c.v_pool, out.o, &out.lse, scale);
  return out;
}

// How a trial dispatches: everything stacked that can be, the default rule, or all folded;
// with or without split-KV in both kernels' items.
enum class Dispatch { stack_all, default_rule, fold_all };

plan::PlanOptions plan_options(AttentionMode mode, Dispatch dispatch, bool split, int trial) {
  plan::PlanOptions options;
  options.mode = mode;
  options.shared_tile_rows = trial % 2 ? 64 : 128;
  if (dispatch == Dispatch::stack_all)
    options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
  if (dispatch == Dispatch::fold_all) options.min_sharers_to_stack = 1 << 30;
  if (split) {  // few items on many slots: long ranges split (shared >= 2 x 512 keys, suffix >= 2 x 16)
    options.shared_slots = 64, options.suffix_slots = 512, options.suffix_min_split_tokens = 16;
    if (trial % 4 == 3) options.shared_slots = 1, options.shared_split_past_one_wave = true;
  } else {
    options.shared_slots = options.suffix_slots = 1;
  }
  return options;
}

TEST(PagedAttentionCpu, RandomForestsMatchFloat64Reference) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  int stacked = 0, folded = 0, shared_splits = 0, suffix_splits = 0, offsets = 0;
  auto reached_every_path = [&] { return stacked && folded && shared_splits && suffix_splits && offsets; };
  // 54 trials, and more while a path has not been reached yet: a random case reaches each one
  // often but not surely (a split shared segment needs a long segment drawn, stacked and read).
  int trial = 0;
  for (; trial < 54 || (!reached_every_path() && trial < 540); ++trial) {
    PagedShape shape;
    shape.page_size = trial % 2 ? 16 : 64;
    shape.groups = std::vector<int>{1, 4, 8}[trial % 3];
    shape.head_dim = trial % 4 < 2 ? 64 : 128;
    shape.kv_heads = rng.uniform_int(1, 2);
    shape.depth = 1 + trial % 3;
    shape.max_roots = 2;
    shape.batch = rng.pick(std::vector<int>{1, 3, 8, 17});
    shape.max_query_tokens = trial % 5 < 2 ? 5 : 1;
    const AttentionMode mode = std::vector{AttentionMode::hydragen, AttentionMode::hydragen, AttentionMode::paged,
                                           AttentionMode::dense}[trial % 4];
    shape.dense = mode == AttentionMode::dense;
    const auto dispatch = static_cast<Dispatch>(trial / 3 % 3);
    const bool split = trial % 6 < 3;
    if (split) shape.segment_lengths.push_back(1100);
    plan::PlanOptions options = plan_options(mode, dispatch, split, trial);
    options.causal = trial % 9 != 8;
    options.suffix_tile_rows =  // (one-row items: e8; 0 = by rule)
        std::vector<int>{plan::kSuffixTileRows, 1, 3, plan::kSuffixTileRowsByRule}[trial % 7 % 4];
    const float scale = trial % 7 == 6 ? 0.3f : 0.f;

    const PagedCase c = random_paged_case(shape, rng);
    const plan::AttentionPlan plan = plan::build_attention_plan(c.layout, options);
    TreeAttentionOptions ref_options;
    ref_options.causal = options.causal;
    if (scale > 0) ref_options.scale = scale;
    const AttentionState ref = reference_tree_attention(c.tree, c.q, ref_options);
    const std::string what = concat("trial ", trial, " mode ", mode_name(mode), " page ", shape.page_size, " d ",
                                    shape.head_dim, " G ", shape.groups, " Hkv ", shape.kv_heads, " depth ", shape.depth,
                                    " batch ", shape.batch, " T<=", shape.max_query_tokens, " dispatch ",
                                    static_cast<int>(dispatch), split ? " split" : "", options.causal ? "" : " non-causal",
                                    " suffix tile rows ", options.suffix_tile_rows);
    expect_state_near(run_plan(plan, c, scale), ref, kTolerance, what);

    stacked += plan.stacked_segments > 0;
    folded += plan.stacked_segments == 0 && !c.layout.segments.empty();
    // A stacked segment split: items of the same rows and kv head over different pieces.
    std::map<std::pair<int, int>, std::set<int>> pieces_of_rows;
    for (const auto& it : plan.shared_items) pieces_of_rows[{it.row_begin, it.kv_head}].insert(it.piece_begin);
    for (const auto& [rows, pieces] : pieces_of_rows) shared_splits += pieces.size() > 1;
    for (const auto& g : plan.groups) suffix_splits += g.items > 1;
    for (const auto& seg : c.layout.segments) offsets += seg.first_slot > 0;
  }
  // The trials reached every path they are meant to.
  SCOPED_TRACE(concat(trial, " trials"));
  EXPECT_GT(stacked, 0);
  EXPECT_GT(folded, 0);
  EXPECT_GT(shared_splits, 0);
  EXPECT_GT(suffix_splits, 0);
  EXPECT_GT(offsets, 0);
  std::printf("%d trials: %d stacked, %d folded, %d split shared rows, %d split suffix groups, %d offset segments\n",
              trial, stacked, folded, shared_splits, suffix_splits, offsets);
}

// Plans whose kv heads split one stacked segment differently (PlanOptions::shared_head_splits:
// bulk heads whole, the rest split finer, each merge group reading its own head's columns)
// against the float64 reference: MHA and GQA, page sizes 16 and 64, one- and multi-token
// queries, suffixes empty to 100 keys. Every trial's plan has heads of different splits.
TEST(PagedAttentionCpu, HeadSplitPlansMatchFloat64Reference) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (int trial = 0; trial < 6; ++trial) {
    PagedShape shape;
    shape.page_size = trial % 2 ? 16 : 64;
    shape.kv_heads = trial % 3 == 2 ? 3 : 6;
    shape.groups = shape.kv_heads == 3 ? 4 : 1;
    shape.batch = shape.kv_heads == 3 ? 32 : 128;  // 128 rows per kv head: two tiles of 64
    shape.segment_lengths = {2048};
    shape.max_query_tokens = trial % 3 == 1 ? 3 : 1;
    const PagedCase c = random_paged_case(shape, rng);
    plan::PlanOptions options;
    options.shared_tile_rows = 64, options.shared_slots = 264, options.suffix_slots = 1584;
    bool differ = false;
    const plan::AttentionPlan plan = head_split_plan(c.layout, options, differ);
    const std::string what = concat("trial ", trial, " page ", shape.page_size, " Hkv ", shape.kv_heads, " G ",
                                    shape.groups, " T<=", shape.max_query_tokens);
    ASSERT_TRUE(differ) << what << ": the heads' splits should differ";
    expect_state_near(run_plan(plan, c), reference_tree_attention(c.tree, c.q), kTolerance, what);
  }
}

// A sequence with no keys at all, one under an empty segment, one with keys: the empty rows
// are exactly (0, -inf) in every mode, never NaN.
TEST(PagedAttentionCpu, EmptyContextsGiveZeroAndMinusInfinity) {
  Rng rng;
  SCOPED_TRACE(rng.trace());
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense}) {
    PagedShape shape;
    shape.kv_heads = 2, shape.groups = 4, shape.batch = 6;
    shape.segment_lengths = {0};
    shape.suffix_lengths = {0, 0, 5};
    shape.dense = mode == AttentionMode::dense;
    const PagedCase c = random_paged_case(shape, rng);
    plan::PlanOptions options;
    options.mode = mode;
    const AttentionState out = run_plan(plan::build_attention_plan(c.layout, options), c);
    const AttentionState ref = reference_tree_attention(c.tree, c.q);
    expect_state_near(out, ref, kTolerance, mode_name(mode));
    std::int64_t row = 0, empty_rows = 0;
    for (const Sequence& seq : c.tree.sequences) {
      for (std::int64_t t = 0; t < seq.query_tokens; ++t, ++row) {
        if (seq.k.size(0) > 0) continue;
        ++empty_rows;
        for (std::int64_t h = 0; h < out.lse.size(1); ++h) {
          EXPECT_EQ(out.lse.get(row * out.lse.size(1) + h), -std::numeric_limits<double>::infinity());
          for (std::int64_t j = 0; j < out.o.size(2); ++j)
            ASSERT_EQ(out.o.get((row * out.o.size(1) + h) * out.o.size(2) + j), 0.0) << mode_name(mode);
        }
      }
    }
    if (empty_rows == 0) GTEST_LOG_(INFO) << "no empty sequence drawn this time (" << mode_name(mode) << ")";
  }
}

void expect_error(const std::function<void()>& call, const std::string& words) {
  try {
    call();
    FAIL() << "expected an error mentioning '" << words << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(PagedAttentionCpu, RejectsBadArgumentsNamingThem) {
  Rng rng;
  PagedShape shape;
  shape.kv_heads = 2, shape.groups = 2, shape.batch = 3;
  shape.suffix_lengths = {4};
  const PagedCase c = random_paged_case(shape, rng);
  const plan::AttentionPlan plan = plan::build_attention_plan(c.layout);
  Tensor out = Tensor::empty(c.q.shape(), DType::f32);
  Tensor lse = Tensor::empty({c.q.size(0), c.q.size(1)}, DType::f32);
  const Tensor q_bf16 = c.q.to(DType::bf16);
  expect_error([&] { cpu::run_attention_plan(plan, q_bf16, c.k_pool, c.v_pool, out); }, "q must be a contiguous f32");
  const Tensor short_q = c.q.slice(0, 0, c.q.size(0) - 1).clone();
  expect_error([&] { cpu::run_attention_plan(plan, short_q, c.k_pool, c.v_pool, out); }, "query rows");
  const Tensor flat_pool = c.k_pool.reshape({c.k_pool.size(0) * c.k_pool.size(1), c.k_pool.size(2), c.k_pool.size(3)});
  expect_error([&] { cpu::run_attention_plan(plan, c.q, flat_pool, c.v_pool, out); }, "k_pool must be");
  const Tensor small_v = c.v_pool.slice(0, 0, 1).clone();
  expect_error([&] { cpu::run_attention_plan(plan, c.q, c.k_pool, small_v, out); }, "v_pool has shape");
  Tensor small_out = Tensor::empty({c.q.size(0), c.q.size(1), 8}, DType::f32);
  expect_error([&] { cpu::run_attention_plan(plan, c.q, c.k_pool, c.v_pool, small_out); }, "out has shape");
  Tensor bad_lse = Tensor::empty({c.q.size(0), 1}, DType::f32);
  expect_error([&] { cpu::run_attention_plan(plan, c.q, c.k_pool, c.v_pool, out, &bad_lse); }, "out_lse has shape");
  expect_error([&] { cpu::run_attention_plan(plan, c.q, c.k_pool, c.v_pool, out, &lse, -1.f); }, "scale");
  plan::AttentionPlan bad = plan;
  bad.pages[0] = static_cast<std::int32_t>(c.k_pool.size(0));
  expect_error([&] { cpu::run_attention_plan(bad, c.q, c.k_pool, c.v_pool, out); }, "plan.pages[0]");
  bad = plan;
  bad.groups[0].items += 1;
  expect_error([&] { cpu::run_attention_plan(bad, c.q, c.k_pool, c.v_pool, out); }, "plan.groups[0]");
  // A piece's pool slot that is not its page list's (the suffix kernels would read other keys).
  const auto in_one_page =
      std::find_if(plan.pieces.begin(), plan.pieces.end(), [](const plan::PlanPiece& pc) { return pc.slot >= 0; });
  ASSERT_NE(in_one_page, plan.pieces.end());
  const auto at = in_one_page - plan.pieces.begin();
  bad = plan;
  bad.pieces[at].slot += 1;
  expect_error([&] { cpu::run_attention_plan(bad, c.q, c.k_pool, c.v_pool, out); }, concat("plan.pieces[", at, "] has slot"));
  // A shared item whose pieces do not run on (the shared kernel derives its unmasked blocks
  // from the first and last piece).
  PagedShape shared_shape;
  shared_shape.batch = 3, shared_shape.segment_lengths = {300}, shared_shape.suffix_lengths = {2};
  const PagedCase sc = random_paged_case(shared_shape, rng);
  plan::PlanOptions stack_all;  // one unsplit shared item per kv head, whatever the tree drawn
  stack_all.min_sharers_to_stack = 1, stack_all.min_segment_tokens_to_stack = 1;
  stack_all.fold_when_stacking_saves_little = false, stack_all.shared_slots = 1;
  const plan::AttentionPlan shared_plan = plan::build_attention_plan(sc.layout, stack_all);
  const auto multi = std::find_if(shared_plan.shared_items.begin(), shared_plan.shared_items.end(),
                                  [](const plan::PlanItem& it) { return it.piece_count >= 2; });
  ASSERT_NE(multi, shared_plan.shared_items.end());
  Tensor shared_out = Tensor::empty(sc.q.shape(), DType::f32);
  cpu::run_attention_plan(shared_plan, sc.q, sc.k_pool, sc.v_pool, shared_out);  // as built: accepted
  bad = shared_plan;
  bad.pieces[multi->piece_begin + 1].position += 1;
  expect_error([&] { cpu::run_attention_plan(bad, sc.q, sc.k_pool, sc.v_pool, shared_out); },
               concat("plan.shared_items[", multi - shared_plan.shared_items.begin(), "]'s piece 0"));
  bad = shared_plan;
  plan::PlanPiece& shorter = bad.pieces[multi->piece_begin];
  shorter.tokens -= 1;  // (its slot kept the page list's, so that only the new check can refuse it)
  shorter.slot = static_cast<std::int32_t>(
      plan::piece_pool_slot(bad.pages, shared_shape.page_size, shorter.page_offset, shorter.token_begin, shorter.tokens));
  expect_error([&] { cpu::run_attention_plan(bad, sc.q, sc.k_pool, sc.v_pool, shared_out); }, "is not a whole block");
  // The merge launch's rows (AttentionPlan::merge_rows): every row of every split group, once.
  PagedShape split_shape;
  split_shape.groups = 4, split_shape.batch = 3, split_shape.segment_lengths = {0}, split_shape.suffix_lengths = {700};
  const PagedCase xc = random_paged_case(split_shape, rng);
  plan::PlanOptions split_suffixes;
  split_suffixes.mode = AttentionMode::paged, split_suffixes.suffix_min_split_tokens = 128;
  const plan::AttentionPlan split_plan = plan::build_attention_plan(xc.layout, split_suffixes);
  ASSERT_GE(split_plan.merge_rows.size(), 2u);
  Tensor split_out = Tensor::empty(xc.q.shape(), DType::f32);
  cpu::run_attention_plan(split_plan, xc.q, xc.k_pool, xc.v_pool, split_out);  // as built: accepted
  bad = split_plan;
  bad.merge_rows.pop_back();
  expect_error([&] { cpu::run_attention_plan(bad, xc.q, xc.k_pool, xc.v_pool, split_out); }, "plan.merge_rows holds");
  bad = split_plan;
  bad.merge_rows[1].row = 0;  // row 0 twice
  expect_error([&] { cpu::run_attention_plan(bad, xc.q, xc.k_pool, xc.v_pool, split_out); }, "plan.merge_rows[1]");
  bad = split_plan;
  bad.merge_rows[0].item += 1;  // not the group's first item
  expect_error([&] { cpu::run_attention_plan(bad, xc.q, xc.k_pool, xc.v_pool, split_out); }, "plan.merge_rows[0]");
}

}  // namespace
}  // namespace hydragen::testing
