// The exact shared-prefix attention API.
//
// Attention of a query over keys split into segments K = K1 || K2 is recovered exactly from
// each part's state (o_i, lse_i), o_i the softmax-weighted values and lse_i the log-sum-exp
// of the scaled scores:
//   o = (o1·e^lse1 + o2·e^lse2) / (e^lse1 + e^lse2),   lse = log(e^lse1 + e^lse2).
// An empty segment is (o = 0, lse = -inf). So every segment of a sharing tree can be
// attended once by the stacked queries of all sequences below it, then merged per sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "hydragen/tensor.h"

namespace hydragen {

// ---- attention state --------------------------------------------------------------------
struct AttentionState {
  Tensor o;    // f32 [rows, Hq, d]: softmax-weighted values (tree attention on CUDA: q's dtype)
  Tensor lse;  // f32 [rows, Hq]: natural-log sum of exp(scaled scores); -inf when empty

  // The state of an empty segment: o = 0, lse = -inf.
  static AttentionState empty(std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                              Device device = Device::cpu);
  std::int64_t rows() const { return o.size(0); }
  std::int64_t heads() const { return o.size(1); }
  std::int64_t head_dim() const { return o.size(2); }
};

// into = merge(into, other), in place, on the CPU. Shapes must match.
void merge_states(AttentionState& into, const AttentionState& other);
// The merge of all states (n >= 1); the result is a new state.
AttentionState merge_states(std::span<const AttentionState> states);

// ---- plain attention --------------------------------------------------------------------
struct AttentionOptions {
  std::optional<float> scale;  // default 1/sqrt(head_dim)
  // Queries are the last T positions of the keys: query t sees keys [0, S - T + t].
  bool causal = false;
};

// q [T, Hq, d], k and v [S, Hkv, d], Hq a multiple of Hkv (GQA). f32, f16 or bf16 on the
// CPU (computed in f32). Returns the state of the T query rows: tree attention of one sequence
// whose suffix is k, v.
AttentionState attend(const Tensor& q, const Tensor& k, const Tensor& v,
                      const AttentionOptions& options = {});

// ---- sharing tree -----------------------------------------------------------------------
inline constexpr int kNoParent = -1;

// A node of the sharing tree: a run of tokens whose K/V is stored once.
struct Segment {
  int parent = kNoParent;  // index into SharingTree::segments, or kNoParent for a root
  Tensor k;                // [len, Hkv, d], len may be 0
  Tensor v;                // [len, Hkv, d]
};

// A leaf: one generation stream with its own suffix and query_tokens query rows. Its
// queries are the last query_tokens positions of its context (ancestors' segments, then
// the suffix); with causal attention and query_tokens > 1 they must lie in the suffix.
struct Sequence {
  int parent = kNoParent;  // the segment it hangs under, or kNoParent for no shared prefix
  Tensor k;                // suffix [len, Hkv, d], len may be 0
  Tensor v;
  std::int64_t query_tokens = 1;
};

// A forest of shared segments with sequences as leaves. Queries for tree attention are
// packed in sequence order: rows [offset(s), offset(s) + query_tokens(s)) belong to s.
struct SharingTree {
  std::vector<Segment> segments;
  std::vector<Sequence> sequences;

  // Throws hydragen::Error naming the node and the problem: parent out of range (orphan),
  // cycles, mismatched Hkv / head dim / dtype, k and v shapes that differ, ranks != 3.
  void validate() const;
  std::int64_t kv_heads() const;        // after validate(); 0 for an empty tree
  std::int64_t head_dim() const;
  std::int64_t query_rows() const;      // sum of query_tokens
  // Segment indices from the root down to the sequence's parent.
  std::vector<int> path(int sequence) const;
  std::int64_t context_tokens(int sequence) const;  // ancestors' lengths + suffix
};

// How attention reads shared segments. hydragen, paged and dense give the same result; none
// is the model-level throughput ceiling (attention skipped, projections kept), which no
// attention call accepts.
enum class AttentionMode {
  hydragen,  // every segment attended once by the stacked queries of all sequences below it
  paged,     // each sequence reads its whole context itself, prefix from the one shared store
  dense,     // each sequence holds and reads its own contiguous copy of its context
  none,      // attention skipped (the engine's and benchmarks' ceiling)
};
const char* mode_name(AttentionMode mode);
// Throws hydragen::Error naming the unknown name and the four accepted ones.
AttentionMode parse_mode(const std::string& name);

struct TreeAttentionOptions {
  std::optional<float> scale;  // default 1/sqrt(head_dim); given, finite and > 0
  bool causal = true;          // mask among a sequence's own query tokens
  AttentionMode mode = AttentionMode::hydragen;
  int page_size = 64;          // tokens per page of the pool the tree is paged into (2^k >= 16)
};

// q [query_rows, Hq, d] packed as described above. Returns the exact state per query row.
// The engine's path: the tree is paged into a K/V pool (segments back to back, each sequence
// on pages of its own; dense: a copy of its context each), planned for the mode
// (plan::build_attention_plan) and run by the plan runner of q's device: on the CPU (K/V and
// q any float dtype) an f32 state; on CUDA (q bf16 or f16; K/V on the device in q's dtype,
// or on the host) a state on the device, o in q's dtype, ordered on the legacy default stream
// (backend/cuda/cuda_attention.h says what the call waits for).
AttentionState tree_attention(const SharingTree& tree, const Tensor& q,
                              const TreeAttentionOptions& options = {});

// The float64 reference: plain full attention over each sequence's concatenated context.
// Returns o as f64 [query_rows, Hq, d] and lse as f64 [query_rows, Hq].
AttentionState reference_tree_attention(const SharingTree& tree, const Tensor& q,
                                        const TreeAttentionOptions& options = {});

// One level of sharing: B sequences under one prefix.
//   q        [B, Hq, d] (one query token each) or [B, T, Hq, d]
//   prefix_k [P, Hkv, d], prefix_v the same
//   suffix_k [B, S_max, Hkv, d]; sequence b uses the first suffix_lens[b] tokens
// Returns the state with rows = B·T, row b·T + t for token t of sequence b.
AttentionState hydragen_attention(const Tensor& q, const Tensor& prefix_k, const Tensor& prefix_v,
                                  const Tensor& suffix_k, const Tensor& suffix_v,
                                  std::span<const std::int64_t> suffix_lens,
                                  const TreeAttentionOptions& options = {});

}  // namespace hydragen
