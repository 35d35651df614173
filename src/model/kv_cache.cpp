#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "hydragen/error.h"

namespace hydragen {

KvCache::KvCache(const ModelConfig& config)
    : kv_heads_(config.num_kv_heads),
      head_dim_(config.head_dim),
      k_(static_cast<std::size_t>(config.num_layers)),
      v_(static_cast<std::size_t>(config.num_layers)) {}

void KvCache::reserve(std::int64_t tokens) {
  const std::int64_t needed = length_ + tokens;
  if (needed <= capacity_) return;
  const std::int64_t capacity = std::max<std::int64_t>({needed, 2 * capacity_, 16});
  for (std::size_t l = 0; l < k_.size(); ++l) {
    for (Tensor* store : {&k_[l], &v_[l]}) {
      Tensor grown = Tensor::zeros({capacity, kv_heads_, head_dim_}, DType::f32);
      if (length_ > 0) grown.slice(0, 0, length_).copy_from(store->slice(0, 0, length_));
      *store = grown;
    }
  }
  capacity_ = capacity;
}

void KvCache::write(std::int64_t layer, const Tensor& k, const Tensor& v) {
  HG_CHECK(layer >= 0 && layer < layers(), "KvCache::write: layer ", layer, " of ", layers());
  const std::vector<std::int64_t> expected{k.defined() ? k.size(0) : 0, kv_heads_, head_dim_};
  HG_CHECK(k.shape() == expected && v.shape() == expected && k.dtype() == DType::f32 && v.dtype() == DType::f32,
           "KvCache::write: k and v must be f32 ", shape_str(expected), ", got ", k.shape_str(), " and ",
           v.shape_str());
  const std::int64_t rows = k.size(0);
  HG_CHECK(length_ + rows <= capacity_, "KvCache::write: ", rows, " rows do not fit; call reserve first");
  k_[static_cast<std::size_t>(layer)].slice(0, length_, length_ + rows).copy_from(k);
  v_[static_cast<std::size_t>(layer)].slice(0, length_, length_ + rows).copy_from(v);
}

void KvCache::commit(std::int64_t tokens) {
  HG_CHECK(tokens >= 0 && length_ + tokens <= capacity_, "KvCache::commit: ", tokens, " tokens beyond capacity");
  length_ += tokens;
}

Tensor KvCache::keys(std::int64_t layer, std::int64_t pending) const {
  if (capacity_ == 0) return Tensor::zeros({0, kv_heads_, head_dim_}, DType::f32);
  return k_[static_cast<std::size_t>(layer)].slice(0, 0, length_ + pending);
}

Tensor KvCache::values(std::int64_t layer, std::int64_t pending) const {
  if (capacity_ == 0) return Tensor::zeros({0, kv_heads_, head_dim_}, DType::f32);
  return v_[static_cast<std::size_t>(layer)].slice(0, 0, length_ + pending);
}

}  // namespace hydragen
