// attend(): validation, then tree attention of a one-sequence tree (its keys the suffix, its
// T queries the suffix's last T positions): the same plan runner as every other attention call.
#include "attention/input_checks.h"
#include "hydragen/attention.h"
#include "hydragen/error.h"

namespace hydragen {

AttentionState attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options) {
  check_attention_operand("attend", "k", k, "[S, Hkv, d]");
  check_attention_operand("attend", "v", v, "[S, Hkv, d]");
  HG_CHECK(v.shape() == k.shape(), "attend: v has shape ", v.shape_str(), ", expected the shape of k ", k.shape_str());
  HG_CHECK(k.size(1) > 0, "attend: k has shape ", k.shape_str(), ", expected [S, Hkv >= 1, d]");
  check_query_shape("attend", q, q.size(0), "T", k.size(1), k.size(2));
  check_scale("attend", options.scale);
  for (const auto& [t, name] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}})
    HG_CHECK(t->device() == Device::cpu, "attend: ", name, " is on ", device_name(t->device()),
             ", but attend runs on the cpu only");
  // Like tree attention: a single query may have an empty context (its state is empty).
  HG_CHECK(!options.causal || q.size(0) == 1 || q.size(0) <= k.size(0), "attend: causal attention of T=", q.size(0),
           " queries needs k of shape [S >= ", q.size(0), ", Hkv, d] (the queries are the last T keys), got ",
           k.shape_str());
  if (q.size(0) == 0) return AttentionState::empty(0, q.size(1), q.size(2));
  SharingTree tree;
  tree.sequences.push_back({kNoParent, k, v, q.size(0)});
  TreeAttentionOptions tree_options;
  tree_options.scale = options.scale;
  tree_options.causal = options.causal;
  return tree_attention(tree, q, tree_options);
}

}  // namespace hydragen
