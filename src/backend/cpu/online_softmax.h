// The one attention core of the CPU backend: a tile of query rows against a stream of
// key/value blocks, with a blocked online softmax (FlashAttention's recurrence) and two
// sgemm calls per block. Each item of the CPU plan runner (paged_attention_cpu.cpp) is one tile.
#pragma once

#include <cstdint>
#include <vector>

namespace hydragen::cpu {

// For each query row q (already multiplied by the softmax scale), running max m, sum l and
// accumulator a start at (-inf, 0, 0). For each block of keys K_b and values V_b:
//   s   = q · K_bᵀ                        (sgemm over the whole tile)
//   m'  = max(m, max_j s_j),   p_j = exp(s_j − m')      (masked keys: p_j = 0)
//   l   = l·exp(m − m') + Σ_j p_j
//   a   = a·exp(m − m') + p · V_b         (sgemm over the whole tile)
// finish(): o = a / l, lse = m + log l; a row that saw no key is empty: o = 0, lse = -inf.
// Feeding several runs of keys one after another attends their concatenation.
class OnlineSoftmaxTile {
 public:
  static constexpr std::int64_t kKeyBlock = 256;

  OnlineSoftmaxTile(std::int64_t rows, std::int64_t head_dim);

  std::int64_t rows() const { return rows_; }
  // The scaled query of a row, [head_dim] floats for the caller to fill before attend().
  float* query(std::int64_t row) { return queries_.data() + row * head_dim_; }

  // Attends keys [0, keys): key j at k + j·k_stride, value j at v + j·v_stride, head_dim
  // contiguous floats each. visible_keys (optional, one per row): row i sees only keys
  // [0, visible_keys[i]) of this run, the causal mask.
  void attend(const float* k, std::int64_t k_stride, const float* v, std::int64_t v_stride,
              std::int64_t keys, const std::int64_t* visible_keys = nullptr);

  // Normalises the rows; then output(row) and lse(row) are the row's state.
  void finish();
  const float* output(std::int64_t row) const { return accumulators_.data() + row * head_dim_; }
  float lse(std::int64_t row) const { return running_max_[row]; }

 private:
  std::int64_t rows_, head_dim_;
  std::vector<float> queries_;       // [rows, d]
  std::vector<float> scores_;        // [rows, kKeyBlock], then the probabilities p
  std::vector<float> accumulators_;  // [rows, d]: a, then o after finish()
  std::vector<float> running_max_;   // m, then lse after finish()
  std::vector<float> running_sum_;   // l
};

}  // namespace hydragen::cpu
