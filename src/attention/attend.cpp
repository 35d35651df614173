// attend(): validation, then the backend.
#include "attention/input_checks.h"
#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/head_tile.h"
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
  return cpu::attend(q, k, v, cpu::softmax_scale(options.scale, k.size(2)), options.causal);
}

}  // namespace hydragen
