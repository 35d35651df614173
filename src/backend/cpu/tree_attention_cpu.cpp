// Tree attention on the CPU in the three modes. All three feed the same core
// (OnlineSoftmaxTile) and differ only in which query rows read which K/V:
//   hydragen: each segment once, by the stacked rows of every sequence below it; then each
//             sequence's suffix, merged with its per-depth partial states.
//   paged:    each sequence (its T·G rows per kv head) reads its path's segments from the one
//             shared store, then its suffix, in one running softmax.
//   dense:    each sequence first copies its whole context into its own buffer (the
//             FlashAttention baseline's storage), then reads that copy.
#include <algorithm>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/head_tile.h"
#include "backend/cpu/state_merge.h"
#include "core/thread_pool.h"

namespace hydragen::cpu {

namespace {

struct Inputs {
  const SharingTree& tree;
  const TreePlan& plan;
  const Tensor& q;
  float scale;
  bool causal;
  std::int64_t kv_heads, group, head_dim;
};

// Every segment's and suffix's K/V as f32 rows, converted (if at all) once per call.
struct KvStore {
  std::vector<KvRowsF32> segment_k, segment_v, suffix_k, suffix_v;
  explicit KvStore(const SharingTree& tree) {
    for (const Segment& segment : tree.segments) {
      segment_k.push_back(kv_rows_f32(segment.k));
      segment_v.push_back(kv_rows_f32(segment.v));
    }
    for (const Sequence& sequence : tree.sequences) {
      suffix_k.push_back(kv_rows_f32(sequence.k));
      suffix_v.push_back(kv_rows_f32(sequence.v));
    }
  }
};

// The query rows [first, first + count) as a list.
std::vector<std::int64_t> row_list(std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> rows(count);
  std::iota(rows.begin(), rows.end(), first);
  return rows;
}

// A tile for one sequence's rows of one kv head, queries loaded.
OnlineSoftmaxTile sequence_tile(const Inputs& in, const HeadTileRows& rows) {
  OnlineSoftmaxTile tile(rows.size(), in.head_dim);
  load_queries(in.q, rows, in.scale, tile);
  return tile;
}

// Feeds the run that ends at sequence s's queries (its suffix, or its whole dense copy) with
// the causal mask among its own query tokens, and finishes the tile.
void attend_final_run(const Inputs& in, const HeadTileRows& rows, int s, const KvRowsF32& k, const KvRowsF32& v,
                      OnlineSoftmaxTile& tile) {
  const SequencePlan& sequence = in.plan.sequences[s];
  std::vector<std::int64_t> mask;
  if (in.causal && sequence.query_tokens > 1)
    mask = causal_visible_keys(rows, sequence.first_row, sequence.query_tokens, k.tokens);
  attend_run(tile, rows, k, v, mask.empty() ? nullptr : mask.data());
  tile.finish();
}

// Runs body(s, rows, tile) for every (sequence, kv head) in parallel, the tile's queries loaded.
template <class Body>
void for_each_sequence_head(const Inputs& in, Body&& body) {
  const auto sequences = static_cast<std::int64_t>(in.tree.sequences.size());
  ThreadPool::global().parallel_for(sequences * in.kv_heads, [&](std::int64_t n) {
    const int s = static_cast<int>(n / in.kv_heads);
    const SequencePlan& sequence = in.plan.sequences[s];
    const std::vector<std::int64_t> query_rows = row_list(sequence.first_row, sequence.query_tokens);
    const HeadTileRows rows{query_rows, n % in.kv_heads, in.group};
    OnlineSoftmaxTile tile = sequence_tile(in, rows);
    body(s, rows, tile);
  });
}

// Every segment that someone reads, attended once by all its readers' rows, tile by tile.
// partials[depth] receives the state of each reader row against its depth-th segment.
std::vector<AttentionState> attend_shared_segments(const Inputs& in, const KvStore& store) {
  const auto& segments = in.tree.segments;
  std::vector<AttentionState> partials;
  for (int depth = 0; depth < in.plan.max_depth; ++depth)
    partials.push_back(poisoned_state(in.plan.query_rows, in.q.size(1), in.head_dim));
  std::vector<std::vector<std::int64_t>> reader_rows(segments.size());
  std::vector<std::int64_t> tokens_per_segment(segments.size());
  for (std::size_t i = 0; i < segments.size(); ++i) {
    for (const QueryRowRange& reader : in.plan.segments[i].readers)
      for (std::int64_t t = 0; t < reader.tokens; ++t) reader_rows[i].push_back(reader.first_row + t);
    tokens_per_segment[i] = in.plan.segments[i].reader_rows;
  }
  const std::int64_t tile_tokens =
      choose_tile_tokens(tokens_per_segment, in.kv_heads, in.group, ThreadPool::global().workers());
  struct WorkItem {
    int segment;
    std::int64_t kv_head, first, count;  // tokens [first, first + count) of reader_rows[segment]
  };
  std::vector<WorkItem> items;
  for (std::size_t i = 0; i < segments.size(); ++i)
    for (std::int64_t h = 0; h < in.kv_heads; ++h)
      for (std::int64_t first = 0; first < tokens_per_segment[i]; first += tile_tokens)
        items.push_back({static_cast<int>(i), h, first, std::min(tile_tokens, tokens_per_segment[i] - first)});
  ThreadPool::global().parallel_for(static_cast<std::int64_t>(items.size()), [&](std::int64_t n) {
    const WorkItem& item = items[n];
    const HeadTileRows rows{std::span(reader_rows[item.segment]).subspan(item.first, item.count), item.kv_head,
                            in.group};
    OnlineSoftmaxTile tile = sequence_tile(in, rows);
    attend_run(tile, rows, store.segment_k[item.segment], store.segment_v[item.segment]);
    tile.finish();
    store_state(tile, rows, partials[in.plan.segments[item.segment].depth]);
  });
  return partials;
}

// hydragen: shared segments first, then per (sequence, kv head) the suffix, merged with the
// partial states of the sequence's path.
AttentionState hydragen_mode(const Inputs& in) {
  const KvStore store(in.tree);
  const std::vector<AttentionState> partials = attend_shared_segments(in, store);
  AttentionState out = poisoned_state(in.plan.query_rows, in.q.size(1), in.head_dim);
  const std::int64_t heads = out.heads(), d = in.head_dim;
  for_each_sequence_head(in, [&](int s, const HeadTileRows& rows, OnlineSoftmaxTile& tile) {
    attend_final_run(in, rows, s, store.suffix_k[s], store.suffix_v[s], tile);
    const SequencePlan& sequence = in.plan.sequences[s];
    const std::size_t depth = sequence.path.size();
    std::vector<const float*> o_in(depth + 1);
    std::vector<float> lse_in(depth + 1);
    for (std::int64_t i = 0; i < rows.size(); ++i) {
      const std::int64_t at = rows.query_row(i) * heads + rows.head(i);
      o_in[0] = tile.output(i);
      lse_in[0] = tile.lse(i);
      for (std::size_t level = 0; level < depth; ++level) {
        o_in[level + 1] = partials[level].o.data<float>() + at * d;
        lse_in[level + 1] = partials[level].lse.data<float>()[at];
      }
      merge_state_rows(o_in, lse_in, d, out.o.data<float>() + at * d, out.lse.data<float>() + at);
    }
  });
  return out;
}

// paged: per (sequence, kv head), the path's segments straight from the shared store, then
// the suffix, all in one running softmax.
AttentionState paged_mode(const Inputs& in) {
  const KvStore store(in.tree);
  AttentionState out = poisoned_state(in.plan.query_rows, in.q.size(1), in.head_dim);
  for_each_sequence_head(in, [&](int s, const HeadTileRows& rows, OnlineSoftmaxTile& tile) {
    for (int segment : in.plan.sequences[s].path)
      attend_run(tile, rows, store.segment_k[segment], store.segment_v[segment]);
    attend_final_run(in, rows, s, store.suffix_k[s], store.suffix_v[s], tile);
    store_state(tile, rows, out);
  });
  return out;
}

// dense: per sequence, copy the context, then every kv head reads the copy.
AttentionState dense_mode(const Inputs& in) {
  AttentionState out = poisoned_state(in.plan.query_rows, in.q.size(1), in.head_dim);
  const auto sequences = static_cast<std::int64_t>(in.tree.sequences.size());
  ThreadPool::global().parallel_for(sequences, [&](std::int64_t n) {
    const int s = static_cast<int>(n);
    const SequencePlan& sequence = in.plan.sequences[s];
    const KvRowsF32 k = kv_rows_f32(sequence_context(in.tree, s, false, DType::f32));
    const KvRowsF32 v = kv_rows_f32(sequence_context(in.tree, s, true, DType::f32));
    const std::vector<std::int64_t> query_rows = row_list(sequence.first_row, sequence.query_tokens);
    for (std::int64_t h = 0; h < in.kv_heads; ++h) {
      const HeadTileRows rows{query_rows, h, in.group};
      OnlineSoftmaxTile tile = sequence_tile(in, rows);
      attend_final_run(in, rows, s, k, v, tile);
      store_state(tile, rows, out);
    }
  });
  return out;
}

}  // namespace

AttentionState tree_attention(const SharingTree& tree, const TreePlan& plan, const Tensor& q, float scale,
                              bool causal, AttentionMode mode) {
  const std::int64_t kv_heads = tree.kv_heads();
  const Inputs in{tree, plan, q, scale, causal, kv_heads, q.size(1) / kv_heads, q.size(2)};
  switch (mode) {
    case AttentionMode::hydragen: return hydragen_mode(in);
    case AttentionMode::paged: return paged_mode(in);
    case AttentionMode::dense: return dense_mode(in);
    case AttentionMode::none: break;  // refused by tree_attention
  }
  return hydragen_mode(in);
}

}  // namespace hydragen::cpu
