// PagedKv: the K/V storage of a page pool, one key and one value tensor per layer of shape
// [pages, page_size, Hkv, d] (f32 on the CPU, bf16 on a CUDA device). A token's K/V sits at
// slot = page * page_size + offset; which pages belong to which segment is kv::PagePool's and
// kv::RadixTree's business, the plan tells attention where to read.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/paged_plan.h"
#include "hydragen/tensor.h"
#include "model/model_config.h"

namespace hydragen {

// One forward step's rows: the new tokens of every sequence (or prefill chunk), packed in
// the plan's query order, each with its context position and the slot its K/V goes to.
struct StepRows {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> positions;
  std::vector<std::int32_t> slots;
  std::int64_t size() const { return static_cast<std::int64_t>(tokens.size()); }
};

struct PagedKv {
  int page_size = 0;
  std::vector<Tensor> k, v;  // per layer [pages, page_size, Hkv, d]

  static PagedKv allocate(const ModelConfig& config, std::int64_t pages, int page_size, DType dtype, Device device);
  // Bytes one token's K/V takes over all layers.
  static std::int64_t bytes_per_token(const ModelConfig& config, DType dtype);
  std::int64_t layers() const { return static_cast<std::int64_t>(k.size()); }
  std::int64_t pages() const { return k.empty() ? 0 : k[0].size(0); }
  std::int64_t bytes() const;
  // Layer `layer` viewed as [slots, Hkv, d].
  Tensor k_slots(std::int64_t layer) const;
  Tensor v_slots(std::int64_t layer) const;
};

// Checks a step's rows against the config, the pool and the plan (if any): equal lengths,
// tokens in the vocabulary, slots inside the pool (or -1: a padding row whose K/V is not
// kept), one plan query row per step row.
void check_step_rows(const StepRows& rows, const ModelConfig& config, const PagedKv& kv,
                     const plan::AttentionPlan* plan);

}  // namespace hydragen
