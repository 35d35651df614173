// hydragen_attention(): one level of sharing, B sequences under one prefix, as a two-level
// SharingTree of views (no K/V is copied) handed to tree_attention.
#include "attention/input_checks.h"
#include "hydragen/attention.h"
#include "hydragen/error.h"

namespace hydragen {

AttentionState hydragen_attention(const Tensor& q, const Tensor& prefix_k, const Tensor& prefix_v,
                                  const Tensor& suffix_k, const Tensor& suffix_v,
                                  std::span<const std::int64_t> suffix_lens, const TreeAttentionOptions& options) {
  constexpr const char* fn = "hydragen_attention";
  check_attention_operand(fn, "prefix_k", prefix_k, "[P, Hkv, d]");
  HG_CHECK(prefix_v.defined() && prefix_v.shape() == prefix_k.shape(), fn, ": prefix_v has shape ",
           prefix_v.defined() ? prefix_v.shape_str() : "[]", ", expected the shape of prefix_k ", prefix_k.shape_str());
  const std::int64_t kv_heads = prefix_k.size(1), head_dim = prefix_k.size(2);
  HG_CHECK(q.defined() && (q.rank() == 3 || q.rank() == 4), fn, ": q has shape ", q.defined() ? q.shape_str() : "[]",
           ", expected [B, Hq, d] or [B, T, Hq, d]");
  const std::int64_t batch = q.size(0);
  const std::int64_t tokens = q.rank() == 4 ? q.size(1) : 1;
  const std::string suffix_shape = concat("[B=", batch, ", S_max, Hkv=", kv_heads, ", d=", head_dim, "]");
  for (const auto& [t, name] : {std::pair{&suffix_k, "suffix_k"}, std::pair{&suffix_v, "suffix_v"}}) {
    HG_CHECK(t->defined() && t->rank() == 4 && t->size(0) == batch && t->size(2) == kv_heads &&
                 t->size(3) == head_dim,
             fn, ": ", name, " has shape ", t->defined() ? t->shape_str() : "[]", ", expected ", suffix_shape);
  }
  HG_CHECK(suffix_v.shape() == suffix_k.shape(), fn, ": suffix_v has shape ", suffix_v.shape_str(),
           ", expected the shape of suffix_k ", suffix_k.shape_str());
  HG_CHECK(static_cast<std::int64_t>(suffix_lens.size()) == batch, fn, ": suffix_lens has ", suffix_lens.size(),
           " entries, expected B=", batch, " (one per sequence)");
  const std::int64_t max_len = suffix_k.size(1);
  SharingTree tree;
  tree.segments.push_back({kNoParent, prefix_k, prefix_v});
  for (std::int64_t b = 0; b < batch; ++b) {
    HG_CHECK(0 <= suffix_lens[b] && suffix_lens[b] <= max_len, fn, ": suffix_lens[", b, "] = ", suffix_lens[b],
             ", expected 0..S_max=", max_len);
    tree.sequences.push_back({0, suffix_k.select(0, b).slice(0, 0, suffix_lens[b]),
                              suffix_v.select(0, b).slice(0, 0, suffix_lens[b]), tokens});
  }
  // Rows in sequence order, token-major within a sequence: exactly [B, T] flattened.
  Tensor rows = q;
  if (q.rank() == 4) rows = (q.is_contiguous() ? q : q.clone()).reshape({batch * tokens, q.size(2), q.size(3)});
  return tree_attention(tree, rows, options);
}

}  // namespace hydragen
