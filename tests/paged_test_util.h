// Random paged attention cases for the plan-runner tests (CPU and CUDA): a forest of shared
// segments laid out in a page pool the way the radix tree leaves it -- a segment starts at any
// slot of its first page, a child may continue on its parent's last page, page ids are
// shuffled -- sequences with their suffixes on their own pages, and the SharingTree the float64
// reference reads, gathered back from the pool's pages. Slots no segment or suffix owns hold
// NaN, so a plan or kernel that reads outside its keys shows up as NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "attention_test_util.h"
#include "plan/paged_plan.h"
#include "model/model_ops.h"

namespace hydragen::testing {

struct PagedShape {
  int page_size = 64, kv_heads = 1, groups = 1, head_dim = 64;
  int depth = 1;      // levels of segments (1-3)
  int max_roots = 1;  // roots of the forest drawn from 1..max_roots
  int fanout = 3;     // children per segment drawn from 1..fanout
  int batch = 4;      // sequences
  std::vector<std::int64_t> segment_lengths = {0, 1, 7, 64, 65, 130, 513};
  std::vector<std::int64_t> suffix_lengths = {0, 1, 9, 64, 100};
  int max_query_tokens = 1;  // causal: a sequence's query tokens lie in its suffix
  bool random_first_slot = true;
  bool parentless_sequences = true;  // some sequences under no segment (else all under one)
  bool dense = false;          // the plan reads each sequence's own copy of its context (copy_slots)
  bool round_to_bf16 = false;  // pool and q exact in bf16 (the GPU tests)
  double key_growth = 0;       // K of token j of a run (of n) times 2^(key_growth * j / n): late maxima
  double key_step = 0;         // K of a run's second half times 2^key_step: a max that jumps at once
};

struct PagedCase {
  plan::PagedLayout layout;  // what the plan reads: the tree's pages, or the dense copies
  Tensor k_pool, v_pool;     // f32 [pages, page_size, Hkv, d]
  SharingTree tree;          // the same keys, each segment and suffix contiguous
  Tensor q;                  // f32 [query_rows, Hq, d]
};

namespace paged_detail {

// Pages of one run, logical ids counted up (shuffled at the end).
struct Run {
  std::int32_t first_slot = 0;
  std::int64_t tokens = 0;
  std::vector<std::int32_t> pages;
  bool tail_taken = false;  // a child already continues on this run's last page
  std::int64_t end_slot() const { return first_slot + tokens; }
};

inline std::int64_t slot_of(const Run& run, std::int64_t token, int page_size) {
  const std::int64_t at = run.first_slot + token;
  return std::int64_t{run.pages[at / page_size]} * page_size + at % page_size;
}

inline std::vector<std::int32_t> fresh_pages(std::int64_t slots, int page_size, std::int32_t& next_page) {
  std::vector<std::int32_t> pages;
  for (std::int64_t s = 0; s < slots; s += page_size) pages.push_back(next_page++);
  return pages;
}

}  // namespace paged_detail

inline PagedCase random_paged_case(const PagedShape& shape, Rng& rng) {
  using paged_detail::Run;
  const int ps = shape.page_size, hkv = shape.kv_heads, d = shape.head_dim;
  const std::int64_t token_elems = std::int64_t{hkv} * d;
  std::int32_t next_page = 0;

  // Segments level by level; a child starts on its parent's last page (where the parent ends)
  // or at a random slot of a fresh page.
  std::vector<int> parent_of;
  std::vector<Run> segments;
  auto add_segment = [&](int parent) {
    Run run;
    run.tokens = rng.pick(shape.segment_lengths);
    Run* tail = parent == kNoParent ? nullptr : &segments[parent];
    if (tail != nullptr && (tail->pages.empty() || tail->end_slot() % ps == 0 || tail->tail_taken)) tail = nullptr;
    if (shape.random_first_slot && tail != nullptr && rng.uniform_int(0, 1)) {
      tail->tail_taken = true;
      run.first_slot = static_cast<std::int32_t>(tail->end_slot() % ps);
      run.pages = {tail->pages.back()};
      const std::vector<std::int32_t> more = paged_detail::fresh_pages(run.end_slot() - ps, ps, next_page);
      run.pages.insert(run.pages.end(), more.begin(), more.end());
    } else {
      if (shape.random_first_slot && rng.uniform_int(0, 3) != 0) run.first_slot = rng.uniform_int(0, ps - 1);
      run.pages = paged_detail::fresh_pages(run.end_slot(), ps, next_page);
    }
    segments.push_back(run);
    parent_of.push_back(parent);
    return static_cast<int>(segments.size()) - 1;
  };
  std::vector<int> level;
  for (int r = rng.uniform_int(1, shape.max_roots); r > 0; --r) level.push_back(add_segment(kNoParent));
  for (int depth = 1; depth < shape.depth; ++depth) {
    std::vector<int> next;
    for (int parent : level)
      for (int c = rng.uniform_int(1, shape.fanout); c > 0 && next.size() < 48; --c) next.push_back(add_segment(parent));
    level = next;
  }

  // Sequences: most under the deepest level, some under inner segments, a few under none.
  std::vector<int> seq_parent, query_tokens;
  std::vector<Run> suffixes;
  for (int b = 0; b < shape.batch; ++b) {
    const int roll = rng.uniform_int(0, 9);  // drawn either way: a seed replays the same case
    seq_parent.push_back(roll == 0 && shape.parentless_sequences ? kNoParent
                         : roll <= 2 ? rng.uniform_int(0, static_cast<int>(segments.size()) - 1)
                                     : rng.pick(level));
    Run run;
    run.tokens = rng.pick(shape.suffix_lengths);
    run.pages = paged_detail::fresh_pages(run.tokens, ps, next_page);
    suffixes.push_back(run);
    query_tokens.push_back(run.tokens == 0 ? 1
                                           : rng.uniform_int(1, static_cast<int>(std::min<std::int64_t>(
                                                                    shape.max_query_tokens, run.tokens))));
  }
  auto path_of = [&](int s) {
    std::vector<int> path;
    for (int p = seq_parent[s]; p != kNoParent; p = parent_of[p]) path.insert(path.begin(), p);
    return path;
  };
  std::vector<Run> dense_copies;
  if (shape.dense)
    for (int s = 0; s < shape.batch; ++s) {
      Run run;
      for (int p : path_of(s)) run.tokens += segments[p].tokens;
      run.tokens += suffixes[s].tokens;
      run.pages = paged_detail::fresh_pages(run.tokens, ps, next_page);
      dense_copies.push_back(run);
    }

  // Shuffled page ids; NaN everywhere, then random K/V in the slots of segments and suffixes.
  std::vector<std::int32_t> page_id(next_page);
  std::iota(page_id.begin(), page_id.end(), 0);
  std::shuffle(page_id.begin(), page_id.end(), rng.engine);
  for (auto* runs : {&segments, &suffixes, &dense_copies})
    for (Run& run : *runs)
      for (std::int32_t& p : run.pages) p = page_id[p];
  PagedCase c;
  const std::int64_t pages = std::max(next_page, 1);
  c.k_pool = Tensor::full({pages, ps, hkv, d}, std::numeric_limits<double>::quiet_NaN(), DType::f32);
  c.v_pool = Tensor::full({pages, ps, hkv, d}, std::numeric_limits<double>::quiet_NaN(), DType::f32);
  auto fill = [&](const Run& run) {
    for (std::int64_t j = 0; j < run.tokens; ++j)
      for (Tensor* pool : {&c.k_pool, &c.v_pool}) {
        float* row = pool->data<float>() + paged_detail::slot_of(run, j, ps) * token_elems;
        const double scale =
            pool == &c.k_pool ? std::exp2(shape.key_growth * j / run.tokens + (2 * j >= run.tokens ? shape.key_step : 0))
                              : 1.0;
        for (std::int64_t e = 0; e < token_elems; ++e) row[e] = static_cast<float>(scale * rng.normal());
      }
  };
  for (const Run& run : segments) fill(run);
  for (const Run& run : suffixes) fill(run);
  auto rounded = [&](const Tensor& t) { return shape.round_to_bf16 ? t.to(DType::bf16).to(DType::f32) : t; };
  c.k_pool = rounded(c.k_pool), c.v_pool = rounded(c.v_pool);

  // The reference's tree: each run's rows gathered from the pool.
  auto gather = [&](const Run& run, const Tensor& pool) {
    Tensor t = Tensor::empty({run.tokens, hkv, d}, DType::f32);
    for (std::int64_t j = 0; j < run.tokens; ++j)
      std::memcpy(t.data<float>() + j * token_elems, pool.data<float>() + paged_detail::slot_of(run, j, ps) * token_elems,
                  token_elems * sizeof(float));
    return t;
  };
  for (std::size_t i = 0; i < segments.size(); ++i)
    c.tree.segments.push_back({parent_of[i], gather(segments[i], c.k_pool), gather(segments[i], c.v_pool)});
  for (int s = 0; s < shape.batch; ++s)
    c.tree.sequences.push_back({seq_parent[s], gather(suffixes[s], c.k_pool), gather(suffixes[s], c.v_pool),
                                query_tokens[s]});

  c.layout.page_size = ps, c.layout.kv_heads = hkv, c.layout.q_heads = hkv * shape.groups, c.layout.head_dim = d;
  if (!shape.dense) {
    for (std::size_t i = 0; i < segments.size(); ++i)
      c.layout.segments.push_back({parent_of[i], segments[i].tokens, segments[i].pages, segments[i].first_slot});
    for (int s = 0; s < shape.batch; ++s)
      c.layout.sequences.push_back({seq_parent[s], suffixes[s].tokens, suffixes[s].pages, query_tokens[s]});
  } else {  // the dense baseline: copy each context into the sequence's own pages
    std::vector<std::int32_t> src, dst;
    for (int s = 0; s < shape.batch; ++s) {
      std::int64_t at = 0;
      auto copy = [&](const Run& run) {
        for (std::int64_t j = 0; j < run.tokens; ++j, ++at) {
          src.push_back(static_cast<std::int32_t>(paged_detail::slot_of(run, j, ps)));
          dst.push_back(static_cast<std::int32_t>(paged_detail::slot_of(dense_copies[s], at, ps)));
        }
      };
      for (int p : path_of(s)) copy(segments[p]);
      copy(suffixes[s]);
      c.layout.sequences.push_back({kNoParent, dense_copies[s].tokens, dense_copies[s].pages, query_tokens[s]});
    }
    const auto n = static_cast<std::int64_t>(src.size());
    const Tensor src_slots = Tensor::wrap(src.data(), {n}, DType::i32), dst_slots = Tensor::wrap(dst.data(), {n}, DType::i32);
    for (Tensor* pool : {&c.k_pool, &c.v_pool}) {
      Tensor slots_view = pool->reshape({pages * ps, hkv, d});
      copy_slots(src_slots, dst_slots, slots_view);
    }
  }
  std::int64_t rows = 0;
  for (int t : query_tokens) rows += t;
  c.q = rounded(random_tensor({rows, std::int64_t{hkv} * shape.groups, d}, DType::f32, rng));
  return c;
}

// A plan of `layout` whose stacked segment's kv heads are split differently
// (PlanOptions::shared_head_splits, forced on): the fewest full-tile slots from 3 up for which
// the heads' item counts differ (the rows, and so the tiles, depend on the drawn query tokens).
// `differ` says whether one was found by 16 slots.
inline plan::AttentionPlan head_split_plan(const plan::PagedLayout& layout, plan::PlanOptions options, bool& differ) {
  options.shared_split_past_one_wave = true, options.shared_head_splits = true;
  options.fold_when_stacking_saves_little = false;
  plan::AttentionPlan plan;
  differ = false;
  for (int slots = 3; slots <= 16 && !differ; ++slots) {
    options.shared_full_tile_slots = slots;
    plan = plan::build_attention_plan(layout, options);
    std::map<int, int> items_of_head;
    for (const auto& it : plan.shared_items) ++items_of_head[it.kv_head];
    std::set<int> counts;
    for (const auto& [head, n] : items_of_head) counts.insert(n);
    differ = counts.size() > 1;
  }
  return plan;
}

// B sequences under one segment of `prefix` tokens, `suffix` own tokens each (one query row),
// d 128, pages numbered in order; for plan-shape tests at benchmark sizes.
inline plan::PagedLayout one_segment_layout(int batch, int kv_heads, int q_heads, std::int64_t prefix,
                                            std::int64_t suffix) {
  plan::PagedLayout layout;
  layout.kv_heads = kv_heads, layout.q_heads = q_heads, layout.head_dim = 128;
  std::int32_t next = 0;
  auto pages = [&](std::int64_t tokens) {
    std::vector<std::int32_t> ids;
    for (std::int64_t t = 0; t < tokens; t += layout.page_size) ids.push_back(next++);
    return ids;
  };
  layout.segments.push_back({kNoParent, prefix, pages(prefix), 0});
  for (int b = 0; b < batch; ++b) layout.sequences.push_back({0, suffix, pages(suffix), 1, 0});
  return layout;
}

}  // namespace hydragen::testing
