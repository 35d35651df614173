// The attention plan over a paged K/V pool: small index arrays, built on the host, that
// tell the two attention kernels what to read and where to put partial states.
//
// K/V live in a pool of pages [num_pages, page_size, Hkv, d]. A segment of the sharing tree
// is a run of its page list: it starts at slot `first_slot` of its first page (the radix tree
// splits segments at any token, so two segments may share a page) and its last page may be
// partly filled. A sequence's suffix is a run of its own pages the same way (slot 0 for a
// decoding sequence; the engine's prefill of a tree node hands the node in as a suffix).
// A plan has two work lists:
//   shared items: (a range of the pieces of one stacked segment, kv head, tile of <= 64
//                 query rows of the sequences below) -> fp32 partial state per row
//   suffix items: (a range of one sequence's own keys: folded segments + suffix, kv head,
//                 tile of <= kSuffixTileRows of its rows) -> partial state; the last item of a merge
//                 group merges every partial state of its rows into the final output.
// A query "row" of a tile is (query token, g) with q head = kv_head * G + g (GQA).
// Keys are read in pieces of <= kBlockTokens tokens; a piece never spans two segments (it may
// span pages: the kernels look the page up per token).
#pragma once

#include <cstdint>
#include <vector>

#include "hydragen/attention.h"

namespace hydragen::plan {

// Keys per piece: the kernels' K/V block. Both kernels use it.
inline constexpr int kBlockTokens = 64;
inline constexpr int kSharedTileRows = 128;  // default query rows per shared item (8 warps x 16)
inline constexpr int kSuffixTileRows = 8;  // query rows per suffix item (decode kernel: one warp)

// Dispatch: a segment is stacked (attended once by all sequences below it) only when it is
// read by at least kMinSharersToStack sequences and holds at least kMinSegmentTokensToStack
// tokens; otherwise it is folded into each sequence's own read (kernel 2). Stacking a
// segment with one reader only adds a partial state to merge; a segment shorter than a
// block costs a launch's worth of items for no re-use (see perf-notes: v4-suffix).
inline constexpr int kMinSharersToStack = 2;
inline constexpr std::int64_t kMinSegmentTokensToStack = 64;
// Split-KV: a kernel's items run on a persistent grid of `slots` resident blocks; long
// ranges are split so the items fill whole waves of slots (never below kMinSplitTokens keys
// per split). The defaults are the H200's (132 SMs x blocks per SM); the CUDA backend
// passes the device's own counts.
inline constexpr int kSharedSlots = 264;
inline constexpr int kSuffixSlots = 396;
inline constexpr std::int64_t kMinSplitTokens = 512;
// A stacked segment shorter than 8 x kMinSplitTokens may split into up to 8 pieces of
// tokens / 8 keys, never below kShortSplitTokens, when it holds more than kShortSplitSuffixRatio
// times the plan's longest suffix: a 1K prefix under a small decoding batch then fills 8
// shared items instead of 2 (see perf-notes: v6-split).
inline constexpr std::int64_t kShortSplitTokens = 128;
inline constexpr int kShortSplits = 8;
inline constexpr std::int64_t kShortSplitSuffixRatio = 4;
inline constexpr std::int64_t kMinSuffixSplitTokens = 128;  // the decode kernel: 4 chunks of 32 keys
inline constexpr int kMaxSplits = 64;
// The suffix split's cost model (suffix_splits_for): each split's partial state costs about
// kSuffixColumnCostTokensPerRow keys of one item's stream per row of the item, to write and to
// merge (see perf-notes: Suffix splits).
inline constexpr double kSuffixColumnCostTokensPerRow = 2;

// PlanOptions::suffix_tile_rows = kSuffixTileRowsByRule: the rows per suffix item are chosen by
// one_row_suffix_items below (the CUDA backend's default): one-row GQA decode items where the
// suffixes are 1-2 keys, where the items are few, and where the one-row items fit one wave of
// suffix slots with suffixes of <= 512 keys; else full tiles, as each one-row item reads its
// keys again (see perf-notes: Rows per suffix item).
inline constexpr int kSuffixTileRowsByRule = 0;
inline constexpr std::int64_t kOneRowShortMeanKeys = 2;
inline constexpr std::int64_t kOneRowMaxMeanKeys = 512;
inline constexpr std::int64_t kOneRowFewItems = 64;

// Where each segment's and each sequence's keys are, in pages of the pool.
struct PagedLayout {
  int page_size = 64;
  int kv_heads = 0;
  int q_heads = 0;
  int head_dim = 0;
  struct SegmentPages {
    int parent = kNoParent;
    std::int64_t tokens = 0;
    std::vector<std::int32_t> pages;  // ceil((first_slot + tokens) / page_size) page ids
    std::int32_t first_slot = 0;      // slot of the first token in pages[0], [0, page_size)
    // Stacked in every mode, whatever its readers and length: the engine's prefill segments,
    // read by the many query rows of one chunk (the fold rule never unstacks them).
    bool always_stack = false;
    bool operator==(const SegmentPages&) const = default;
  };
  struct SequencePages {
    int parent = kNoParent;
    std::int64_t suffix_tokens = 0;
    std::vector<std::int32_t> pages;  // ceil((first_slot + suffix_tokens) / page_size) page ids
    int query_tokens = 1;
    std::int32_t first_slot = 0;  // slot of the first suffix token in pages[0], [0, page_size)
    bool operator==(const SequencePages&) const = default;
  };
  std::vector<SegmentPages> segments;
  std::vector<SequencePages> sequences;
  bool operator==(const PagedLayout&) const = default;
};

// Plain structs copied byte for byte to the device (int32 fields only).
struct PlanPiece {
  std::int32_t page_offset;  // into AttentionPlan::pages
  std::int32_t token_begin;  // first token's slot, counted from slot 0 of the list's first page
  std::int32_t tokens;       // 1..kBlockTokens
  std::int32_t position;     // context position of the first token (for the causal mask)
  // The first token's pool slot (page id x page_size + offset) where all of the piece's tokens
  // lie in one page, so that token j is at slot + j: the suffix kernels then find their keys
  // without reading the page list (one memory round trip less before the first keys,
  // see perf-notes: v31). -1 where the piece spans pages (pieces read through `pages`).
  std::int32_t slot;
};
struct PlanRow {
  std::int32_t token;         // packed query token row (index into q's first dim)
  std::int32_t group;         // g in [0, G)
  std::int32_t key_limit;     // keys at context positions >= key_limit are masked
  std::int32_t state_stride;  // partial entries between columns of this row (T*Hq)
  std::int32_t state_base;    // partial entry of (column 0, this token, q head 0)
};
struct PlanItem {
  std::int32_t kv_head;
  std::int32_t piece_begin, piece_count;
  std::int32_t row_begin, row_count;
  std::int32_t column;  // which partial state of its rows it writes
  std::int32_t group;   // suffix items: merge group; shared items: -1
};
struct PlanMergeGroup {
  std::int32_t items;    // suffix items that write this group's rows (their columns are its last)
  std::int32_t columns;  // partial states per row to merge (shared + suffix splits)
};
// One row of a split merge group (PlanMergeGroup::items > 1): the CUDA merge launch's unit of
// work (split_merge_kernel).
struct PlanMergeRow {
  std::int32_t item;  // the group's first suffix item
  std::int32_t row;   // which of its rows
};

struct AttentionPlan {
  std::vector<std::int32_t> pages;
  std::vector<PlanPiece> pieces;
  std::vector<PlanRow> rows;
  std::vector<PlanItem> shared_items;
  std::vector<PlanItem> suffix_items;
  std::vector<PlanMergeGroup> groups;
  std::vector<PlanMergeRow> merge_rows;  // every row of every split merge group, group by group
  std::int64_t state_entries = 0;  // partial (o, lse) entries, each [d] floats + 1 lse
  std::int64_t query_rows = 0;     // packed query tokens
  int stacked_segments = 0;
  int max_columns = 0;
  // Most stacked work is in full tiles: split for PlanOptions::shared_full_tile_slots (the CUDA
  // runner then runs its warp-specialized shared kernel).
  bool shared_full_tiles = false;
};

struct PlanOptions {
  AttentionMode mode = AttentionMode::hydragen;  // paged and dense fold every segment; none is refused
  bool causal = true;
  // Stacking rule (tests override these to force both paths).
  int min_sharers_to_stack = kMinSharersToStack;
  std::int64_t min_segment_tokens_to_stack = kMinSegmentTokensToStack;
  int shared_slots = kSharedSlots;
  // When > 0: a plan with at least half of its stacked work (rows x keys) in tiles of more than
  // shared_tile_rows / 2 rows is split for this many shared slots instead (and says so in
  // AttentionPlan::shared_full_tiles). The CUDA backend sets it to its warp-specialized
  // kernel's slots (one block per SM), which pays only where tiles are full.
  int shared_full_tile_slots = 0;
  int suffix_slots = kSuffixSlots;
  std::int64_t suffix_min_split_tokens = kMinSuffixSplitTokens;
  // A sequence's own keys are split by the estimated time (suffix_splits_for in paged_plan.cpp:
  // the busiest slot's keys plus a cost per merge column); the cost of one split's partial
  // state, in keys per row of the item (kSuffixColumnCostTokensPerRow).
  double suffix_column_cost = kSuffixColumnCostTokensPerRow;
  // Query rows per suffix item, 1..kSuffixTileRows, or kSuffixTileRowsByRule (0): 1 where
  // one_row_suffix_items holds, else kSuffixTileRows. Fewer rows: more, shorter items, each
  // reading its K/V again (from L2 mostly), and one merge group per tile.
  int suffix_tile_rows = kSuffixTileRows;
  // Fewest keys per split of a stacked segment (the shared kernel's items), and the floor for
  // a short segment's up to kShortSplits pieces (see kShortSplitTokens).
  std::int64_t shared_min_split_tokens = kMinSplitTokens;
  std::int64_t shared_short_split_tokens = kShortSplitTokens;
  int shared_tile_rows = kSharedTileRows;  // 64 or 128 (16 rows per warp)
  // Fold every segment back into the suffixes when stacking would not make the suffix launch
  // (waves of items x longest item, at full suffix tiles) at least a quarter shorter: then the
  // shared launch and the extra merge columns are pure cost (see perf-notes: v7-fold). Tests
  // that force stacking turn it off, as does prefill.
  bool fold_when_stacking_saves_little = true;
  // Split stacked segments also when their items already fill a wave of shared_slots (see
  // build_attention_plan). Off by default; the CUDA backend turns it on with its wgmma shared
  // kernel (plan_options_for_device).
  bool shared_split_past_one_wave = false;
  // A full-tile plan (AttentionPlan::shared_full_tiles) with one stacked segment and several kv
  // heads may split that segment's heads differently: the first heads whole or split few ways,
  // the rest split finer, so that the full-tile kernel's last rounds of items (item i runs on
  // block i % shared_full_tile_slots) are as full as its first (see shared_head_splits in
  // paged_plan.cpp). A head's columns then differ from another's; each merge group reads its
  // own. Off by default; the CUDA backend turns it on with its full-tile kernel (see
  // perf-notes: v19).
  bool shared_head_splits = false;
};

// shared_head_splits' cost model, in 128-key blocks of one SM (the full-tile kernel's step: a
// 128-row tile against two pieces): the busiest block's items, each its blocks
// (ceil(pieces / 2)) plus kHeadSplitItemOverheadBlocks (its Q load, its partial state's write,
// the pipeline turning over), plus the merge columns' traffic: a row's column is ~1 KB written
// by the shared launch and read by the suffix launch, kHeadSplitBlocksPerColumnRow per (row,
// column), as measured (see perf-notes: v19).
inline constexpr double kHeadSplitItemOverheadBlocks = 1.0;
inline constexpr double kHeadSplitBlocksPerColumnRow = 0.8e-4;
inline constexpr int kMostHeadSplits = 8;

// Splits per kv head of one stacked segment in a full-tile plan (PlanOptions::
// shared_head_splits): `heads` kv heads of `tiles` row tiles each over `pieces` pieces, on
// `slots` blocks that take items i, i + slots, ... in (kv head, tile, split) order, against
// `uniform` splits for every head. Returns one split count per head (all `uniform` where
// nothing is >= 2% better); rows_per_head weighs the merge columns. Exposed for its tests.
std::vector<int> shared_head_splits(int heads, std::int64_t tiles, std::int64_t pieces, std::int64_t rows_per_head,
                                    int slots, int uniform);

// The rule of kSuffixTileRowsByRule for a plan's suffix launch: `sequences` decoding one query
// token each (false for any other plan) under `kv_heads` x `groups` query heads, `own_keys`
// keys read by the suffix items of all sequences together (suffixes and folded segments, per
// kv head), on `suffix_slots` resident items. True: one row per item.
bool one_row_suffix_items(std::int64_t sequences, int kv_heads, int groups, bool one_token_each,
                          std::int64_t own_keys, std::int64_t suffix_slots);

// PlanPiece::slot of a piece of `tokens` keys from slot `token_begin` of the page list at
// pages[page_offset]: its first token's pool slot where the piece lies in one page, else -1.
// build_attention_plan fills it so; the CPU plan runner checks it against this.
std::int64_t piece_pool_slot(const std::vector<std::int32_t>& pages, int page_size, std::int64_t page_offset,
                             std::int64_t token_begin, std::int64_t tokens);

// Validates the layout (parents, page counts) and builds the plan.
AttentionPlan build_attention_plan(const PagedLayout& layout, const PlanOptions& options = {});

}  // namespace hydragen::plan
