// Builds the two work lists of an attention step from a paged sharing tree. See paged_plan.h.
#include "plan/paged_plan.h"

#include <algorithm>
#include <climits>
#include <functional>

#include "hydragen/error.h"

namespace hydragen::plan {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A run of `tokens` slots from slot first_slot of its first page: first_slot inside a page,
// ceil((first_slot + tokens) / page_size) pages.
void check_page_run(int page_size, const char* what, int index, std::int32_t first_slot, std::int64_t tokens,
                    const std::vector<std::int32_t>& pages) {
  HG_CHECK(first_slot >= 0 && first_slot < page_size, "build_attention_plan: ", what, " ", index, " has first_slot ",
           first_slot, ", expected [0, page_size = ", page_size, ")");
  HG_CHECK(tokens >= 0, "build_attention_plan: ", what, " ", index, " has ", tokens, " tokens");
  const std::int64_t expected = ceil_div(first_slot + tokens, page_size);
  HG_CHECK(static_cast<std::int64_t>(pages.size()) == expected, "build_attention_plan: ", what, " ", index, " has ",
           pages.size(), " pages for first_slot ", first_slot, " + ", tokens, " tokens, expected ceil((", first_slot,
           " + ", tokens, ") / ", page_size, ") = ", expected);
}

void validate_layout(const PagedLayout& layout) {
  HG_CHECK(layout.page_size > 0 && layout.page_size % 16 == 0, "build_attention_plan: page_size must be a ",
           "positive multiple of 16, got ", layout.page_size);
  HG_CHECK(layout.kv_heads > 0 && layout.q_heads > 0 && layout.q_heads % layout.kv_heads == 0,
           "build_attention_plan: q_heads (", layout.q_heads, ") must be a multiple of kv_heads (",
           layout.kv_heads, ")");
  const int n = static_cast<int>(layout.segments.size());
  for (int i = 0; i < n; ++i) {
    const auto& seg = layout.segments[i];
    HG_CHECK(seg.parent == kNoParent || (seg.parent >= 0 && seg.parent < n), "build_attention_plan: segment ",
             i, " has parent ", seg.parent, ", expected -1 or [0, ", n, ")");
    check_page_run(layout.page_size, "segment", i, seg.first_slot, seg.tokens, seg.pages);
    int hops = 0;  // a chain longer than n segments is a cycle
    for (int p = seg.parent; p != kNoParent; p = layout.segments[p].parent)
      HG_CHECK(++hops <= n, "build_attention_plan: segment ", i, " is on a cycle");
  }
  for (std::size_t s = 0; s < layout.sequences.size(); ++s) {
    const auto& seq = layout.sequences[s];
    HG_CHECK(seq.parent == kNoParent || (seq.parent >= 0 && seq.parent < n), "build_attention_plan: sequence ",
             s, " has parent ", seq.parent, ", expected -1 or [0, ", n, ")");
    check_page_run(layout.page_size, "sequence", static_cast<int>(s), seq.first_slot, seq.suffix_tokens, seq.pages);
    HG_CHECK(seq.query_tokens >= 1, "build_attention_plan: sequence ", s, " needs query_tokens >= 1");
  }
}

}  // namespace

std::int64_t piece_pool_slot(const std::vector<std::int32_t>& pages, int page_size, std::int64_t page_offset,
                             std::int64_t token_begin, std::int64_t tokens) {
  const std::int64_t page = token_begin / page_size;
  if ((token_begin + tokens - 1) / page_size != page) return -1;
  return std::int64_t{pages[static_cast<std::size_t>(page_offset + page)]} * page_size + token_begin % page_size;
}

namespace {

// Appends the pieces of `tokens` keys of the page list at plan.pages[page_offset], the first
// at slot first_slot of its first page; returns how many.
int append_pieces(AttentionPlan& plan, int page_size, std::int32_t page_offset, std::int64_t tokens,
                  std::int64_t position, std::int32_t first_slot) {
  int count = 0;
  for (std::int64_t b = 0; b < tokens; b += kBlockTokens, ++count) {
    const std::int64_t begin = first_slot + b, n = std::min<std::int64_t>(kBlockTokens, tokens - b);
    const std::int64_t slot = piece_pool_slot(plan.pages, page_size, page_offset, begin, n);
    HG_CHECK(slot < INT32_MAX, "build_attention_plan: pool slot ", slot, " does not fit 32 bits");
    plan.pieces.push_back({page_offset, static_cast<std::int32_t>(begin), static_cast<std::int32_t>(n),
                           static_cast<std::int32_t>(position + b), static_cast<std::int32_t>(slot)});
  }
  return count;
}

// The most splits splits_for and suffix_splits_for consider for a range of `tokens` keys: none
// under min_split_tokens keys, at most kMaxSplits, at most two waves of `slots`; 1 where the
// `base_items` unsplit items already fill the slots (or there is nothing to split).
std::int64_t split_limit(std::int64_t tokens, std::int64_t base_items, int slots, std::int64_t min_split_tokens) {
  if (tokens <= 0 || base_items <= 0 || base_items >= slots) return 1;
  return std::min<std::int64_t>({std::max<std::int64_t>(1, tokens / min_split_tokens), kMaxSplits,
                                 ceil_div(2 * std::int64_t{slots}, base_items)});
}

// Split count for a range of `tokens` keys when the kernel's unsplit work is `base_items`
// items on `slots` resident blocks: the fewest splits that fill the waves best. A split must
// improve the filled fraction by 2% of itself (an absolute margin would never split a handful
// of items on thousands of slots).
int splits_for(std::int64_t tokens, std::int64_t base_items, int slots,
               std::int64_t min_split_tokens = kMinSplitTokens) {
  auto fill = [&](std::int64_t s) {
    const std::int64_t items = base_items * s;
    return double(items) / double(ceil_div(items, slots) * slots);
  };
  const std::int64_t most = split_limit(tokens, base_items, slots, min_split_tokens);
  std::int64_t best = 1;
  for (std::int64_t s = 2; s <= most; ++s)
    if (fill(s) > fill(best) * 1.02) best = s;
  return static_cast<int>(best);
}

// Split count for a sequence's own `tokens` keys in the suffix launch: the count with the least
// estimated time, in keys of one item's stream,
//   waves x keys per split + PlanOptions::suffix_column_cost x rows x splits:
// the busiest slot's keys, plus the partial state each split adds to every row of the item,
// merged once all the others are done (by the last arrival or the merge launch). The fill of
// the waves alone split more and merged more columns (see perf-notes: Suffix splits).
int suffix_splits_for(std::int64_t tokens, std::int64_t base_items, int slots, std::int64_t min_split_tokens,
                      std::int64_t rows, double column_cost) {
  const std::int64_t most = split_limit(tokens, base_items, slots, min_split_tokens);
  auto cost = [&](std::int64_t s) {
    return double(ceil_div(base_items * s, slots) * ceil_div(tokens, s)) + column_cost * double(rows * s);
  };
  std::int64_t best = 1;
  for (std::int64_t s = 2; s <= most; ++s)
    if (cost(s) < cost(best)) best = s;
  return static_cast<int>(best);
}

// Heads [0, bulk) split k_bulk ways, the rest k_tail ways.
struct HeadSplits {
  int bulk, k_bulk, k_tail;
};

// shared_head_splits' cost (paged_plan.h): the busiest block's items in closed form.
double head_splits_cost(const HeadSplits& h, int heads, std::int64_t tiles, std::int64_t pieces,
                        std::int64_t rows_per_head, int slots) {
  auto item_blocks = [&](int k) { return double(ceil_div(ceil_div(pieces, k), 2)) + kHeadSplitItemOverheadBlocks; };
  const std::int64_t bulk_items = std::int64_t{h.bulk} * tiles * h.k_bulk;
  const std::int64_t tail_items = std::int64_t{heads - h.bulk} * tiles * h.k_tail;
  const double w_bulk = item_blocks(h.k_bulk), w_tail = item_blocks(h.k_tail);
  const std::int64_t q_bulk = bulk_items / slots, r_bulk = bulk_items % slots;
  const std::int64_t q_tail = tail_items / slots, r_tail = tail_items % slots;
  // Block c runs q_bulk bulk items, one more for c < r_bulk, and q_tail tail items, one more
  // for c in the cyclic range [r_bulk, r_bulk + r_tail): both extras where that range wraps.
  double extra = std::max(r_bulk > 0 ? w_bulk : 0.0, r_tail > 0 ? w_tail : 0.0);
  if (r_bulk > 0 && r_bulk + r_tail > slots) extra = w_bulk + w_tail;
  const double busiest = double(q_bulk) * w_bulk + double(q_tail) * w_tail + extra;
  const double columns = double(h.bulk) * h.k_bulk + double(heads - h.bulk) * h.k_tail;
  return busiest + kHeadSplitBlocksPerColumnRow * columns * double(rows_per_head);
}

}  // namespace

// The full-tile kernel's block c takes items c, c + slots, ... of the plan's (kv head, tile,
// split) order, so with one split count everywhere the last round can leave blocks idle: 40/40
// at B=1024 has 320 tiles of 16K keys; 2 splits = 640 items = 4.85 rounds, so 112 blocks run 5
// items of 64 blocks (of 128 keys) and 20 run 4. Whole tiles for the first 33 heads (264 items:
// 2 rounds of 128 blocks) and 7 splits for the other 7 (392 items of ~18.3 blocks: 3 rounds)
// give every block 2 x 128 + <= 3 x 18.3 = 311 instead of 320, and 33 of 40 heads' rows one
// merge column instead of two. The tiles of one head keep one split count, so the blocks that
// read a head's keys at the same time still share them in L2 (MHA tiles would be DRAM-bound
// without that reuse); the bulk heads fill whole rounds, so every block starts the tail
// together, and the tail's items go out split-major (kv head, split, tile), so the tiles of a
// (head, split) run side by side. Searched: heads [0, bulk) at k_bulk <= 4 splits, the rest at
// k_tail in (k_bulk, kMostHeadSplits], items of >= 2 pieces; taken when the cost model
// (paged_plan.h) is >= 2% under the uniform split's.
std::vector<int> shared_head_splits(int heads, std::int64_t tiles, std::int64_t pieces, std::int64_t rows_per_head,
                                    int slots, int uniform) {
  std::vector<int> splits(static_cast<std::size_t>(std::max(heads, 0)), uniform);
  if (heads < 2 || tiles <= 0 || pieces <= 0 || slots <= 0 || uniform < 1) return splits;
  const int most = static_cast<int>(std::min<std::int64_t>(kMostHeadSplits, std::max<std::int64_t>(1, pieces / 2)));
  const double base = head_splits_cost({heads, uniform, uniform}, heads, tiles, pieces, rows_per_head, slots);
  HeadSplits best{heads, uniform, uniform};
  double best_cost = base;
  for (int k_bulk = 1; k_bulk <= std::min(most, 4); ++k_bulk)
    for (int k_tail = k_bulk + 1; k_tail <= most; ++k_tail)
      for (int bulk = 1; bulk < heads; ++bulk) {
        if (std::int64_t{bulk} * tiles * k_bulk % slots != 0) continue;  // whole rounds of bulk items
        const double cost = head_splits_cost({bulk, k_bulk, k_tail}, heads, tiles, pieces, rows_per_head, slots);
        if (cost < best_cost) best_cost = cost, best = {bulk, k_bulk, k_tail};
      }
  if (best_cost > 0.98 * base) return splits;
  for (int kh = 0; kh < heads; ++kh) splits[static_cast<std::size_t>(kh)] = kh < best.bulk ? best.k_bulk : best.k_tail;
  return splits;
}

bool one_row_suffix_items(std::int64_t sequences, int kv_heads, int groups, bool one_token_each,
                          std::int64_t own_keys, std::int64_t suffix_slots) {
  if (groups <= 1 || !one_token_each || sequences <= 0) return false;  // (MHA decode items are one row already)
  const std::int64_t items = sequences * kv_heads * groups;
  return own_keys <= kOneRowShortMeanKeys * sequences || items <= kOneRowFewItems ||
         (items <= suffix_slots && own_keys <= kOneRowMaxMeanKeys * sequences);
}

AttentionPlan build_attention_plan(const PagedLayout& layout, const PlanOptions& options) {
  validate_layout(layout);
  HG_CHECK(options.mode != AttentionMode::none,
           "build_attention_plan: options.mode is none (attention skipped: no plan to build), expected hydragen, "
           "paged or dense");
  HG_CHECK(options.shared_tile_rows == 64 || options.shared_tile_rows == 128,
           "build_attention_plan: shared_tile_rows must be 64 or 128, got ", options.shared_tile_rows);
  HG_CHECK(options.suffix_tile_rows >= kSuffixTileRowsByRule && options.suffix_tile_rows <= kSuffixTileRows,
           "build_attention_plan: suffix_tile_rows must be 1..", kSuffixTileRows, " (or 0: by rule), got ",
           options.suffix_tile_rows);
  HG_CHECK(options.shared_min_split_tokens >= 1 && options.shared_short_split_tokens >= 1 &&
               options.suffix_min_split_tokens >= 1,
           "build_attention_plan: min split tokens must be positive, got shared ", options.shared_min_split_tokens,
           ", shared short ", options.shared_short_split_tokens, ", suffix ", options.suffix_min_split_tokens);
  const int num_segments = static_cast<int>(layout.segments.size());
  const int num_sequences = static_cast<int>(layout.sequences.size());
  const int hkv = layout.kv_heads, hq = layout.q_heads, groups = hq / hkv;
  AttentionPlan plan;

  // Page lists, concatenated: segments first, then suffixes.
  std::vector<std::int32_t> seg_page_offset(num_segments), seq_page_offset(num_sequences);
  for (int i = 0; i < num_segments; ++i) {
    seg_page_offset[i] = static_cast<std::int32_t>(plan.pages.size());
    plan.pages.insert(plan.pages.end(), layout.segments[i].pages.begin(), layout.segments[i].pages.end());
  }
  for (int s = 0; s < num_sequences; ++s) {
    seq_page_offset[s] = static_cast<std::int32_t>(plan.pages.size());
    plan.pages.insert(plan.pages.end(), layout.sequences[s].pages.begin(), layout.sequences[s].pages.end());
  }

  // Paths (root first), context start of each segment, readers of each segment.
  std::vector<std::vector<int>> path(num_sequences);
  std::vector<std::vector<int>> readers(num_segments);
  std::vector<std::int64_t> rows_below(num_segments, 0);
  for (int s = 0; s < num_sequences; ++s) {
    for (int p = layout.sequences[s].parent; p != kNoParent; p = layout.segments[p].parent) path[s].push_back(p);
    std::reverse(path[s].begin(), path[s].end());
    for (int p : path[s]) {
      readers[p].push_back(s);
      rows_below[p] += std::int64_t{layout.sequences[s].query_tokens} * groups;
    }
  }
  std::vector<std::int64_t> seg_position(num_segments, -1);
  for (int s = 0; s < num_sequences; ++s) {
    std::int64_t pos = 0;
    for (int p : path[s]) {
      seg_position[p] = pos;
      pos += layout.segments[p].tokens;
    }
  }

  // Suffix items of sequence s before splitting (kv heads x row tiles), and their sum: the
  // base the suffix splits fill the slots from. By rule, the rows per item are settled once the
  // own keys are known (below); the fold decision before that counts full tiles.
  const bool rows_by_rule = options.suffix_tile_rows == kSuffixTileRowsByRule;
  int suffix_rows = rows_by_rule ? kSuffixTileRows : options.suffix_tile_rows;
  auto suffix_tiles = [&](int s) {
    return std::int64_t{hkv} * ceil_div(std::int64_t{layout.sequences[s].query_tokens} * groups, suffix_rows);
  };
  std::int64_t suffix_base_items = 0;
  auto set_suffix_rows = [&](int rows) {
    suffix_rows = rows;
    suffix_base_items = 0;
    for (int s = 0; s < num_sequences; ++s) suffix_base_items += suffix_tiles(s);
  };
  set_suffix_rows(suffix_rows);
  bool one_token_each = true;
  for (const auto& seq : layout.sequences) one_token_each &= seq.query_tokens == 1;

  // Dispatch: which segments are stacked, and into how many splits.
  std::vector<char> stacked(num_segments, 0);
  std::int64_t shared_base_items = 0;
  for (int i = 0; i < num_segments; ++i) {
    const auto& seg = layout.segments[i];
    stacked[i] = seg.tokens > 0 && (seg.always_stack || (options.mode == AttentionMode::hydragen &&
                                                         seg.tokens >= options.min_segment_tokens_to_stack &&
                                                         static_cast<int>(readers[i].size()) >=
                                                             std::max(1, options.min_sharers_to_stack)));
    if (stacked[i]) shared_base_items += hkv * ceil_div(rows_below[i], options.shared_tile_rows);
  }
  // Keys sequence s reads in its own suffix items: its suffix and its path's segments that are
  // not stacked (all of them without stacking).
  auto own_keys = [&](int s, bool with_stacking) {
    std::int64_t own = layout.sequences[s].suffix_tokens;
    for (int p : path[s])
      if (!(stacked[p] && (with_stacking || layout.segments[p].always_stack))) own += layout.segments[p].tokens;
    return own;
  };
  // Fold everything back when stacking would not shorten the suffix launch by a quarter (see
  // PlanOptions::fold_when_stacking_saves_little): that launch's time is estimated as its
  // waves of items x its longest item, with each sequence's own keys split as below.
  if (options.fold_when_stacking_saves_little && shared_base_items > 0) {
    auto suffix_cost = [&](bool with_stacking) {
      std::int64_t items = 0, longest = 0;
      for (int s = 0; s < num_sequences; ++s) {
        const std::int64_t own = own_keys(s, with_stacking);
        const int splits = splits_for(own, suffix_base_items, options.suffix_slots, options.suffix_min_split_tokens);
        items += suffix_tiles(s) * splits;
        longest = std::max(longest, ceil_div(own, splits));
      }
      return ceil_div(items, std::max(options.suffix_slots, 1)) * longest;
    };
    if (4 * suffix_cost(true) > 3 * suffix_cost(false)) {
      shared_base_items = 0;
      for (int i = 0; i < num_segments; ++i) {
        stacked[i] = stacked[i] && layout.segments[i].always_stack;
        if (stacked[i]) shared_base_items += hkv * ceil_div(rows_below[i], options.shared_tile_rows);
      }
    }
  }
  // Full tiles (PlanOptions::shared_full_tile_slots): when at least half of the stacked work
  // (rows x keys) lies in tiles of more than half the tile rows, the plan is split for the
  // full-tile kernel's slots and says so.
  std::int64_t shared_slots = options.shared_slots;
  if (options.shared_full_tile_slots > 0 && shared_base_items > 0) {
    const std::int64_t tile = options.shared_tile_rows;
    std::int64_t work = 0, full_tile_work = 0;
    for (int i = 0; i < num_segments; ++i) {
      if (!stacked[i]) continue;
      const std::int64_t last = rows_below[i] % tile;  // rows of a partial last tile (0: none)
      const std::int64_t full_rows = rows_below[i] - (last > tile / 2 ? 0 : last);
      work += rows_below[i] * layout.segments[i].tokens;
      full_tile_work += full_rows * layout.segments[i].tokens;
    }
    plan.shared_full_tiles = 2 * full_tile_work >= work;
    if (plan.shared_full_tiles) shared_slots = options.shared_full_tile_slots;
  }
  std::vector<int> seg_splits(num_segments, 0);
  // Short splits only while the suffixes are short next to the segment (the decode steps they
  // were measured on): under long suffixes the suffix launch's merge of the extra columns cost
  // more than the shared launch saved (see perf-notes: v6-split).
  std::int64_t longest_suffix = 0;
  for (const auto& seq : layout.sequences) longest_suffix = std::max(longest_suffix, seq.suffix_tokens);
  auto shortest_shared_split = [&](std::int64_t tokens) {
    if (tokens <= kShortSplitSuffixRatio * longest_suffix) return options.shared_min_split_tokens;
    return std::min(options.shared_min_split_tokens,
                    std::max(options.shared_short_split_tokens, tokens / kShortSplits));
  };
  // options.shared_split_past_one_wave: shared items that already fill a wave or more are
  // split too when that fills the last wave better. MHA 40/40 at B=1024: 320 items of 128 rows
  // on 264 slots = 1.21 waves (61% of the second wave's slots busy); 4 splits = 1280 items =
  // 4.85 waves (97%). At most 4 splits of >= kMinSplitTokens keys (more splits: more partial
  // states for the suffix kernel to merge).
  auto splits_past_one_wave = [&](std::int64_t tokens) {
    const std::int64_t slots = shared_slots;
    auto fill = [&](std::int64_t s) {
      const std::int64_t items = shared_base_items * s;
      return double(items) / double(ceil_div(items, slots) * slots);
    };
    const std::int64_t most =
        std::min<std::int64_t>(4, std::max<std::int64_t>(1, tokens / options.shared_min_split_tokens));
    std::int64_t best = 1;
    for (std::int64_t s = 2; s <= most; ++s)
      if (fill(s) > fill(best) * 1.02) best = s;
    return static_cast<int>(best);
  };
  for (int i = 0; i < num_segments; ++i)
    if (stacked[i])
      seg_splits[i] = options.shared_split_past_one_wave && shared_base_items >= shared_slots
                          ? splits_past_one_wave(layout.segments[i].tokens)
                          : splits_for(layout.segments[i].tokens, shared_base_items, static_cast<int>(shared_slots),
                                       shortest_shared_split(layout.segments[i].tokens));
  // Splits per (segment, kv head): the segment's, or by head where PlanOptions::
  // shared_head_splits balances the full-tile kernel's rounds (one stacked segment only: with
  // several, their items share the rounds and the model above does not hold).
  std::vector<int> head_splits(static_cast<std::size_t>(num_segments) * hkv, 0);
  bool by_head_splits = false;  // (then the shared items go out split-major)
  for (int i = 0; i < num_segments; ++i)
    std::fill_n(head_splits.begin() + std::int64_t{i} * hkv, hkv, seg_splits[i]);
  if (options.shared_head_splits && plan.shared_full_tiles && hkv > 1 &&
      std::count(stacked.begin(), stacked.end(), 1) == 1) {
    const int i = static_cast<int>(std::find(stacked.begin(), stacked.end(), 1) - stacked.begin());
    const std::vector<int> by_head =
        shared_head_splits(hkv, ceil_div(rows_below[i], options.shared_tile_rows),
                           ceil_div(layout.segments[i].tokens, kBlockTokens), rows_below[i],
                           static_cast<int>(shared_slots), seg_splits[i]);
    std::copy(by_head.begin(), by_head.end(), head_splits.begin() + std::int64_t{i} * hkv);
    by_head_splits = std::adjacent_find(by_head.begin(), by_head.end(), std::not_equal_to<>()) != by_head.end();
  }
  auto splits_of = [&](int segment, int kv_head) { return head_splits[std::size_t(segment) * hkv + kv_head]; };

  // Per sequence: shared columns (per kv head where the heads of a segment split differently,
  // else one count for all: head_stride), own keys, suffix splits, partial-state region (its
  // widest head's columns).
  const int head_stride = by_head_splits ? hkv : 1;
  std::vector<int> shared_columns(static_cast<std::size_t>(num_sequences) * head_stride, 0);
  std::vector<int> own_splits(num_sequences, 1), columns(num_sequences);
  std::vector<std::int64_t> own_tokens(num_sequences, 0), state_base(num_sequences), query_offset(num_sequences);
  std::vector<std::int64_t> context(num_sequences, 0);
  std::vector<int> seg_column(static_cast<std::size_t>(num_segments) * head_stride, 0);
  for (int s = 0; s < num_sequences; ++s) {
    const auto& seq = layout.sequences[s];
    int* shared = shared_columns.data() + std::int64_t{s} * head_stride;
    for (int p : path[s]) {
      context[s] += layout.segments[p].tokens;
      if (stacked[p]) {
        for (int kh = 0; kh < head_stride; ++kh) {
          seg_column[std::size_t(p) * head_stride + kh] = shared[kh];  // the same for every sequence below p
          shared[kh] += splits_of(p, kh);
        }
      } else {
        own_tokens[s] += layout.segments[p].tokens;
      }
    }
    context[s] += seq.suffix_tokens;
    own_tokens[s] += seq.suffix_tokens;
  }
  if (rows_by_rule) {  // the rows for the plan as built (stacked or folded)
    std::int64_t keys = 0;
    for (int s = 0; s < num_sequences; ++s) keys += own_tokens[s];
    set_suffix_rows(one_row_suffix_items(num_sequences, hkv, groups, one_token_each, keys, options.suffix_slots)
                        ? 1
                        : kSuffixTileRows);
  }
  for (int s = 0; s < num_sequences; ++s) {
    const auto& seq = layout.sequences[s];
    own_splits[s] = suffix_splits_for(own_tokens[s], suffix_base_items, options.suffix_slots,
                                      options.suffix_min_split_tokens,
                                      std::min<std::int64_t>(suffix_rows, std::int64_t{seq.query_tokens} * groups),
                                      options.suffix_column_cost);
    const int* shared = shared_columns.data() + std::int64_t{s} * head_stride;
    columns[s] = *std::max_element(shared, shared + head_stride) + own_splits[s];
    plan.max_columns = std::max(plan.max_columns, columns[s]);
    state_base[s] = plan.state_entries;
    plan.state_entries += std::int64_t{columns[s]} * seq.query_tokens * hq;
    query_offset[s] = plan.query_rows;
    plan.query_rows += seq.query_tokens;
  }
  // PlanRow::state_base and the kernels' entry indices are 32-bit.
  HG_CHECK(plan.state_entries <= INT32_MAX, "build_attention_plan: the plan needs ", plan.state_entries,
           " partial states (sequences x query tokens x heads x columns), more than 2^31 - 1");

  // Sizes known now: reserve them (a decode step of 1024 sequences x 40 heads has ~41K items
  // and groups; growing the vectors was half of the plan's host time).
  {
    std::int64_t rows = 0, pieces = 0, shared_items = 0, suffix_items = 0, groups_total = 0;
    for (int i = 0; i < num_segments; ++i) {
      if (!stacked[i]) continue;
      rows += rows_below[i];
      pieces += ceil_div(layout.segments[i].tokens, kBlockTokens);
      for (int kh = 0; kh < hkv; ++kh) shared_items += ceil_div(rows_below[i], options.shared_tile_rows) * splits_of(i, kh);
    }
    for (int s = 0; s < num_sequences; ++s) {
      const std::int64_t tiles = suffix_tiles(s);
      rows += std::int64_t{layout.sequences[s].query_tokens} * groups;
      pieces += ceil_div(own_tokens[s], kBlockTokens) + static_cast<std::int64_t>(path[s].size());  // + a partial block per segment
      suffix_items += tiles * own_splits[s];
      groups_total += tiles;
    }
    plan.rows.reserve(static_cast<std::size_t>(rows));
    plan.pieces.reserve(static_cast<std::size_t>(pieces));
    plan.shared_items.reserve(static_cast<std::size_t>(shared_items));
    plan.suffix_items.reserve(static_cast<std::size_t>(suffix_items));
    plan.groups.reserve(static_cast<std::size_t>(groups_total));
  }

  auto append_rows = [&](int s) {
    const auto& seq = layout.sequences[s];
    for (int t = 0; t < seq.query_tokens; ++t)
      for (int g = 0; g < groups; ++g) {
        const std::int64_t limit = options.causal ? context[s] - seq.query_tokens + t + 1 : INT32_MAX;
        plan.rows.push_back({static_cast<std::int32_t>(query_offset[s] + t), g,
                             static_cast<std::int32_t>(std::min<std::int64_t>(limit, INT32_MAX)),
                             seq.query_tokens * hq, static_cast<std::int32_t>(state_base[s] + std::int64_t{t} * hq)});
      }
  };
  // Emits items for (kv head, row tile, split) over the pieces [piece_begin, +piece_count): kv
  // head kh's tiles split splits[kh * splits_stride] ways into columns first_column[kh *
  // column_stride] + split (stride 0: the same for every head); with merge, a merge group per
  // tile, whose rows' columns end with these. Tile-major within a head (a tile's splits one
  // after another), or split-major (no merge groups: by head splits).
  auto emit_items = [&](std::vector<PlanItem>& items, int row_begin, std::int64_t row_count, int tile_rows,
                        int piece_begin, int piece_count, const int* splits_of_head, int splits_stride,
                        const int* first_column_of_head, int column_stride, bool merge, bool split_major) {
    const std::int64_t tiles = ceil_div(row_count, tile_rows);
    auto item = [&](int kh, std::int64_t tile, int sp, int splits, int first_column, int group) {
      const int rows = static_cast<int>(std::min<std::int64_t>(tile_rows, row_count - tile * tile_rows));
      const int b = splits == 1 ? 0 : static_cast<int>(std::int64_t{piece_count} * sp / splits);
      const int e = splits == 1 ? piece_count : static_cast<int>(std::int64_t{piece_count} * (sp + 1) / splits);
      return PlanItem{kh, piece_begin + b, e - b, row_begin + static_cast<int>(tile) * tile_rows, rows, first_column + sp,
                      group};
    };
    for (int kh = 0; kh < hkv; ++kh) {
      const int splits = splits_of_head[kh * splits_stride], first_column = first_column_of_head[kh * column_stride];
      if (split_major && !merge) {
        for (int sp = 0; sp < splits; ++sp)
          for (std::int64_t tile = 0; tile < tiles; ++tile) items.push_back(item(kh, tile, sp, splits, first_column, -1));
        continue;
      }
      for (std::int64_t tile = 0; tile < tiles; ++tile) {
        const int group = merge ? static_cast<int>(plan.groups.size()) : -1;
        if (merge) plan.groups.push_back({splits, first_column + splits});
        const int first = static_cast<int>(items.size());
        for (int sp = 0; sp < splits; ++sp) items.push_back(item(kh, tile, sp, splits, first_column, group));
        if (merge && splits > 1)
          for (int r = 0; r < items[first].row_count; ++r) plan.merge_rows.push_back({first, r});
      }
    }
  };

  // Shared items: one stacked segment x its readers' rows.
  for (int i = 0; i < num_segments; ++i) {
    if (!stacked[i]) continue;
    ++plan.stacked_segments;
    const int row_begin = static_cast<int>(plan.rows.size());
    for (int s : readers[i]) append_rows(s);
    const int piece_begin = static_cast<int>(plan.pieces.size());
    const auto& seg = layout.segments[i];
    const int count = append_pieces(plan, layout.page_size, seg_page_offset[i], seg.tokens, seg_position[i], seg.first_slot);
    emit_items(plan.shared_items, row_begin, rows_below[i], options.shared_tile_rows, piece_begin, count,
               head_splits.data() + std::int64_t{i} * hkv, 1, seg_column.data() + std::int64_t{i} * head_stride,
               head_stride > 1, false, by_head_splits);
  }
  // Suffix items: one sequence's folded segments and suffix x its own rows.
  for (int s = 0; s < num_sequences; ++s) {
    const auto& seq = layout.sequences[s];
    const int row_begin = static_cast<int>(plan.rows.size());
    append_rows(s);
    const int piece_begin = static_cast<int>(plan.pieces.size());
    int count = 0;
    for (int p : path[s])
      if (!stacked[p])
        count += append_pieces(plan, layout.page_size, seg_page_offset[p], layout.segments[p].tokens, seg_position[p],
                               layout.segments[p].first_slot);
    count += append_pieces(plan, layout.page_size, seq_page_offset[s], seq.suffix_tokens, context[s] - seq.suffix_tokens,
                           seq.first_slot);
    emit_items(plan.suffix_items, row_begin, std::int64_t{seq.query_tokens} * groups, suffix_rows, piece_begin, count,
               &own_splits[s], 0, shared_columns.data() + std::int64_t{s} * head_stride, head_stride > 1, true, false);
  }
  return plan;
}

}  // namespace hydragen::plan
