// The float64 reference: plain softmax attention, one query row at a time, over each
// sequence's concatenated context. Deliberately the obvious algorithm (no blocking, no
// online softmax, no merging) so that it checks the fast paths rather than repeating them.
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/kv_rows.h"
#include "core/thread_pool.h"

namespace hydragen::cpu {

AttentionState reference_attend(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  const std::int64_t tokens = q.size(0), heads = q.size(1), d = q.size(2);
  const std::int64_t keys = k.size(0), kv_heads = k.size(1), group = heads / kv_heads;
  const Tensor k64 = contiguous_copy(k, DType::f64), v64 = contiguous_copy(v, DType::f64);
  AttentionState out{Tensor::zeros({tokens, heads, d}, DType::f64), Tensor::empty({tokens, heads}, DType::f64)};
  std::vector<double> query(d), scores(keys);
  for (std::int64_t t = 0; t < tokens; ++t) {
    // Query t is context position keys - tokens + t; causally it sees keys up to there.
    const std::int64_t visible = causal ? std::max<std::int64_t>(0, keys - tokens + t + 1) : keys;
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t kv_head = h / group;
      load_row(q, t, h, query.data(), scale);
      double max_score = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < visible; ++j) {
        const double* key = k64.data<double>() + (j * kv_heads + kv_head) * d;
        double dot = 0;
        for (std::int64_t c = 0; c < d; ++c) dot += query[c] * key[c];
        scores[j] = dot;
        max_score = std::max(max_score, dot);
      }
      double* o = out.o.data<double>() + (t * heads + h) * d;
      double& lse = out.lse.data<double>()[t * heads + h];
      if (visible == 0) {  // nothing to attend: the empty state, o = 0
        lse = -std::numeric_limits<double>::infinity();
        continue;
      }
      double sum = 0;
      for (std::int64_t j = 0; j < visible; ++j) {
        const double p = std::exp(scores[j] - max_score);
        const double* value = v64.data<double>() + (j * kv_heads + kv_head) * d;
        for (std::int64_t c = 0; c < d; ++c) o[c] += p * value[c];
        sum += p;
      }
      for (std::int64_t c = 0; c < d; ++c) o[c] /= sum;
      lse = max_score + std::log(sum);
    }
  }
  return out;
}

AttentionState reference_tree_attention(const SharingTree& tree, const Tensor& q, double scale, bool causal) {
  const std::int64_t rows = tree.query_rows(), heads = q.size(1), d = q.size(2);
  AttentionState out{Tensor::empty({rows, heads, d}, DType::f64), Tensor::empty({rows, heads}, DType::f64)};
  const auto sequences = static_cast<std::int64_t>(tree.sequences.size());
  std::vector<std::int64_t> first_row(static_cast<std::size_t>(sequences) + 1, 0);  // rows in sequence order
  for (std::int64_t s = 0; s < sequences; ++s) first_row[s + 1] = first_row[s] + tree.sequences[s].query_tokens;
  ThreadPool::global().parallel_for(sequences, [&](std::int64_t n) {
    const int s = static_cast<int>(n);
    const Tensor k = sequence_context(tree, s, false, DType::f64), v = sequence_context(tree, s, true, DType::f64);
    const AttentionState state = reference_attend(q.slice(0, first_row[n], first_row[n + 1]), k, v, scale, causal);
    out.o.slice(0, first_row[n], first_row[n + 1]).copy_from(state.o);
    out.lse.slice(0, first_row[n], first_row[n + 1]).copy_from(state.lse);
  });
  return out;
}

}  // namespace hydragen::cpu
