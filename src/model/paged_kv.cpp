#include "model/paged_kv.h"

#include "hydragen/error.h"

namespace hydragen {

PagedKv PagedKv::allocate(const ModelConfig& config, std::int64_t pages, int page_size, DType dtype, Device device) {
  HG_CHECK(pages > 0 && page_size > 0, "PagedKv: needs pages > 0 and page_size > 0, got ", pages, " and ", page_size);
  PagedKv kv;
  kv.page_size = page_size;
  for (std::int64_t l = 0; l < config.num_layers; ++l) {
    kv.k.push_back(Tensor::zeros({pages, page_size, config.num_kv_heads, config.head_dim}, dtype, device));
    kv.v.push_back(Tensor::zeros({pages, page_size, config.num_kv_heads, config.head_dim}, dtype, device));
  }
  return kv;
}

std::int64_t PagedKv::bytes_per_token(const ModelConfig& config, DType dtype) {
  return 2 * config.num_layers * config.num_kv_heads * config.head_dim * dtype_bytes(dtype);
}

std::int64_t PagedKv::bytes() const {
  std::int64_t total = 0;
  for (std::size_t l = 0; l < k.size(); ++l) total += static_cast<std::int64_t>(k[l].bytes() + v[l].bytes());
  return total;
}

Tensor PagedKv::k_slots(std::int64_t layer) const {
  const Tensor& t = k[static_cast<std::size_t>(layer)];
  return t.reshape({t.size(0) * t.size(1), t.size(2), t.size(3)});
}

Tensor PagedKv::v_slots(std::int64_t layer) const {
  const Tensor& t = v[static_cast<std::size_t>(layer)];
  return t.reshape({t.size(0) * t.size(1), t.size(2), t.size(3)});
}

void check_step_rows(const StepRows& rows, const ModelConfig& config, const PagedKv& kv,
                     const plan::AttentionPlan* plan) {
  HG_CHECK(!rows.tokens.empty(), "step: no rows");
  HG_CHECK(rows.positions.size() == rows.tokens.size() && rows.slots.size() == rows.tokens.size(),
           "step: tokens, positions and slots must have one entry per row, got ", rows.tokens.size(), ", ",
           rows.positions.size(), " and ", rows.slots.size());
  const std::int64_t slots = kv.pages() * kv.page_size;
  for (std::size_t r = 0; r < rows.tokens.size(); ++r) {
    HG_CHECK(rows.tokens[r] >= 0 && rows.tokens[r] < config.vocab_size, "step: token ", rows.tokens[r], " of row ", r,
             " is outside the vocabulary [0, ", config.vocab_size, ")");
    HG_CHECK(rows.positions[r] >= 0, "step: position ", rows.positions[r], " of row ", r, " is negative");
    HG_CHECK(rows.slots[r] >= -1 && rows.slots[r] < slots, "step: slot ", rows.slots[r], " of row ", r,
             " is outside the pool's ", slots, " slots");
  }
  HG_CHECK(plan == nullptr || plan->query_rows == rows.size(), "step: the plan has ",
           plan ? plan->query_rows : 0, " query rows for ", rows.size(), " step rows");
}

}  // namespace hydragen
