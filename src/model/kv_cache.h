// KvCache: one sequence's keys and values for every layer, contiguous, grown by appending.
// The simple store the forward pass needs for tests and greedy decoding; the paged pool of
// the engine (src/kv/) replaces it there.
#pragma once

#include <cstdint>
#include <vector>

#include "hydragen/tensor.h"
#include "model/model_config.h"

namespace hydragen {

class KvCache {
 public:
  KvCache() = default;
  explicit KvCache(const ModelConfig& config);

  std::int64_t length() const { return length_; }  // committed tokens
  std::int64_t layers() const { return static_cast<std::int64_t>(k_.size()); }

  // Makes room for `tokens` more rows (amortised doubling).
  void reserve(std::int64_t tokens);
  // Writes rows [length, length + k.size(0)) of layer `layer`; k and v are f32
  // [new_tokens, Hkv, d]. The rows count once commit() is called after every layer.
  void write(std::int64_t layer, const Tensor& k, const Tensor& v);
  void commit(std::int64_t tokens);

  // Views [0, length + pending) of a layer: committed rows plus `pending` written ones.
  Tensor keys(std::int64_t layer, std::int64_t pending = 0) const;
  Tensor values(std::int64_t layer, std::int64_t pending = 0) const;

 private:
  std::int64_t kv_heads_ = 0;
  std::int64_t head_dim_ = 0;
  std::int64_t length_ = 0;
  std::int64_t capacity_ = 0;
  std::vector<Tensor> k_, v_;  // per layer [capacity, Hkv, d]
};

}  // namespace hydragen
