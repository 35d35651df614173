// tree_attention() and reference_tree_attention(): validation, then the backend of q's device.
// Both backends page the tree and run the engine's attention plan over the pool.
#include <cmath>

#include "attention/input_checks.h"
#include "backend/cpu/cpu_attention.h"
#include "hydragen/attention.h"
#include "hydragen/error.h"

#ifdef HYDRAGEN_WITH_CUDA
#include "backend/cuda/cuda_attention.h"
#endif

namespace hydragen {

namespace {

// Everything tree attention needs beyond SharingTree::validate: an attention mode, a page size,
// q's shape, one device for all, and, for causal attention with several query tokens,
// suffixes that hold the queries.
void check_tree_inputs(const char* function, const SharingTree& tree, const Tensor& q,
                       const TreeAttentionOptions& options) {
  HG_CHECK(options.mode != AttentionMode::none, function,
           ": options.mode is none (a model-level mode: attention skipped), expected hydragen, paged or dense");
  HG_CHECK(options.page_size >= 16 && (options.page_size & (options.page_size - 1)) == 0, function,
           ": options.page_size is ", options.page_size, ", expected a power of two >= 16");
  tree.validate();
  check_scale(function, options.scale);
  const std::int64_t kv_heads = tree.kv_heads();
  if (kv_heads == 0) {  // no segments and no sequences: q must have no rows
    check_attention_operand(function, "q", q, "[query_rows=0, Hq, d]");
    HG_CHECK(q.size(0) == 0, function, ": q has shape ", q.shape_str(), ", expected [query_rows=0, Hq, d] for a tree ",
             "without sequences");
    return;
  }
  check_query_shape(function, q, tree.query_rows(), "query_rows", kv_heads, tree.head_dim());
  const Device kv_device = tree.segments.empty() ? tree.sequences[0].k.device() : tree.segments[0].k.device();
  // The CUDA backend pages K/V from wherever they live; the CPU one reads host memory only.
  HG_CHECK(q.device() == Device::cuda || kv_device == Device::cpu, function, ": q is on cpu but the tree's K/V is on ",
           device_name(kv_device), ", expected K/V on the cpu (or q on cuda)");
  if (!options.causal) return;
  for (std::size_t s = 0; s < tree.sequences.size(); ++s) {
    const Sequence& sequence = tree.sequences[s];
    HG_CHECK(sequence.query_tokens == 1 || sequence.k.size(0) >= sequence.query_tokens, function, ": sequence ", s,
             " has query_tokens=", sequence.query_tokens, " but its suffix k has shape ", sequence.k.shape_str(),
             "; causal attention expects [len >= ", sequence.query_tokens,
             ", Hkv, d] (the queries are the suffix's last tokens)");
  }
}

}  // namespace

AttentionState tree_attention(const SharingTree& tree, const Tensor& q, const TreeAttentionOptions& options) {
  check_tree_inputs("tree_attention", tree, q, options);
  const bool on_cuda = q.device() == Device::cuda;
  if (q.size(0) == 0)  // the state of no rows, in the dtypes the backend returns
    return {Tensor::empty({0, q.size(1), q.size(2)}, on_cuda ? q.dtype() : DType::f32, q.device()),
            Tensor::empty({0, q.size(1)}, DType::f32, q.device())};
  if (on_cuda) {
#ifdef HYDRAGEN_WITH_CUDA
    return cuda::tree_attention(tree, q, options);
#else
    fail("tree_attention: q is on cuda but this build has no CUDA backend");
#endif
  }
  return cpu::tree_attention(tree, q, options);
}

AttentionState reference_tree_attention(const SharingTree& tree, const Tensor& q,
                                        const TreeAttentionOptions& options) {
  check_tree_inputs("reference_tree_attention", tree, q, options);
  HG_CHECK(q.device() == Device::cpu, "reference_tree_attention: q is on ", device_name(q.device()),
           ", but the reference runs on the cpu only");
  if (q.size(0) == 0)
    return {Tensor::empty({0, q.size(1), q.size(2)}, DType::f64), Tensor::empty({0, q.size(1)}, DType::f64)};
  const double scale = options.scale ? *options.scale : 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  return cpu::reference_tree_attention(tree, q, scale, options.causal);
}

}  // namespace hydragen
