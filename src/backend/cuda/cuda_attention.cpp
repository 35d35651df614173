// hydragen::cuda::tree_attention: copy the tree into a page pool, plan, run. See cuda_attention.h.
#include "backend/cuda/cuda_attention.h"

#include <cmath>
#include <cstring>

#include "plan/paged_plan.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/paged_attention_runner.h"

namespace hydragen::cuda {
namespace {

// A K or V tensor as contiguous CPU memory of `dtype`.
Tensor host_copy(const Tensor& t, DType dtype) {
  Tensor h = t.to(Device::cpu).to(dtype);
  return h.is_contiguous() ? h : h.clone();
}

// The pool's host image: K and V of every page, filled run by run.
struct PoolImage {
  std::int64_t token_elems;  // Hkv * d
  int page_size;
  DType dtype;
  std::vector<std::uint16_t> k, v;
  std::int32_t next_page = 0;

  // Appends `tokens` consecutive tokens of k/v (each a list of tensor runs) on fresh pages.
  std::vector<std::int32_t> append(const std::vector<const Segment*>& runs_k_v, const Sequence* suffix) {
    std::int64_t tokens = 0;
    for (const Segment* s : runs_k_v) tokens += s->k.size(0);
    if (suffix) tokens += suffix->k.size(0);
    std::vector<std::int32_t> pages;
    for (std::int64_t t = 0; t < tokens; t += page_size) pages.push_back(next_page++);
    const std::int64_t start = std::int64_t{pages.empty() ? 0 : pages.front()} * page_size * token_elems;
    k.resize(std::int64_t{next_page} * page_size * token_elems);
    v.resize(k.size());
    std::int64_t at = start;
    auto put = [&](const Tensor& tk, const Tensor& tv) {
      const std::int64_t n = tk.size(0) * token_elems;
      if (n == 0) return;
      std::memcpy(k.data() + at, host_copy(tk, dtype).raw(), n * 2);
      std::memcpy(v.data() + at, host_copy(tv, dtype).raw(), n * 2);
      at += n;
    };
    for (const Segment* s : runs_k_v) put(s->k, s->v);
    if (suffix) put(suffix->k, suffix->v);
    return pages;
  }
};

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

PagedTreeImage page_tree(const SharingTree& tree, std::int64_t q_heads, DType dtype, int page_size, bool dense_copy) {
  const std::int64_t hkv = tree.kv_heads(), d = tree.head_dim();
  PoolImage pool{hkv * d, page_size, dtype, {}, {}};
  plan::PagedLayout layout;
  layout.page_size = page_size, layout.kv_heads = static_cast<int>(hkv), layout.q_heads = static_cast<int>(q_heads);
  layout.head_dim = static_cast<int>(d);
  if (!dense_copy)
    for (const Segment& seg : tree.segments)
      layout.segments.push_back({seg.parent, seg.k.size(0), pool.append({&seg}, nullptr)});
  for (int s = 0; s < static_cast<int>(tree.sequences.size()); ++s) {
    const Sequence& seq = tree.sequences[s];
    const int query_tokens = static_cast<int>(seq.query_tokens);
    if (dense_copy) {  // the sequence's own contiguous copy of its whole context
      std::vector<const Segment*> runs;
      for (int p : tree.path(s)) runs.push_back(&tree.segments[p]);
      layout.sequences.push_back({kNoParent, tree.context_tokens(s), pool.append(runs, &seq), query_tokens});
    } else {
      layout.sequences.push_back({seq.parent, seq.k.size(0), pool.append({}, &seq), query_tokens});
    }
  }
  return {std::move(layout), std::move(pool.k), std::move(pool.v)};
}

AttentionState tree_attention(const SharingTree& tree, const Tensor& q, const TreeAttentionOptions& options,
                              int page_size) {
  tree.validate();
  HG_CHECK(q.device() == Device::cuda, "cuda::tree_attention: q must be a CUDA tensor");
  HG_CHECK(q.dtype() == DType::bf16 || q.dtype() == DType::f16, "cuda::tree_attention: q must be bf16 or f16, got ",
           dtype_name(q.dtype()));
  HG_CHECK(q.rank() == 3 && q.is_contiguous(), "cuda::tree_attention: q must be contiguous [query_rows, Hq, d], got ",
           q.shape_str());
  const std::int64_t rows = tree.query_rows(), hq = q.size(1), d = q.size(2), hkv = tree.kv_heads();
  HG_CHECK(q.size(0) == rows, "cuda::tree_attention: q has ", q.size(0), " rows, the tree has ", rows, " query tokens");
  HG_CHECK(hkv == 0 || (d == tree.head_dim() && hq % hkv == 0), "cuda::tree_attention: q ", q.shape_str(),
           " does not match the tree (Hkv ", hkv, ", d ", tree.head_dim(), ")");
  HG_CHECK(supported_head_dim(static_cast<int>(d)), "cuda::tree_attention: head_dim ", d,
           " is not supported on CUDA (supported: 64, 128)");
  HG_CHECK(page_size >= 16 && (page_size & (page_size - 1)) == 0, "cuda::tree_attention: page_size must be a power of two >= 16, got ",
           page_size);
  if (rows == 0) return AttentionState::empty(0, hq, d);

  PagedTreeImage image = page_tree(tree, hq, q.dtype(), page_size, options.mode == AttentionMode::dense);
  const plan::PagedLayout& layout = image.layout;
  const plan::PlanOptions plan_options =
      plan_options_for_device(q.dtype(), static_cast<int>(d), options.mode, options.causal);
  const plan::AttentionPlan plan = plan::build_attention_plan(layout, plan_options);

  const std::int64_t pool_elems = std::max<std::int64_t>(image.k.size(), 8);
  Tensor k_pool = Tensor::empty({pool_elems}, q.dtype(), Device::cuda);
  Tensor v_pool = Tensor::empty({pool_elems}, q.dtype(), Device::cuda);
  if (!image.k.empty()) {
    HG_CUDA_CHECK(cudaMemcpy(k_pool.raw(), image.k.data(), image.k.size() * 2, cudaMemcpyHostToDevice));
    HG_CUDA_CHECK(cudaMemcpy(v_pool.raw(), image.v.data(), image.v.size() * 2, cudaMemcpyHostToDevice));
  }
  Tensor out = Tensor::empty({rows, hq, d}, q.dtype(), Device::cuda);
  Tensor out_lse = Tensor::empty({rows, hq}, DType::f32, Device::cuda);
  HG_CUDA_CHECK(cudaMemset(out.raw(), 0xff, out.bytes()));  // NaN: every output must be written
  HG_CUDA_CHECK(cudaMemset(out_lse.raw(), 0xff, out_lse.bytes()));

  PagedAttentionRunner runner(q.dtype(), static_cast<int>(d), static_cast<int>(hq), static_cast<int>(hkv),
                              PlanCapacity::of(plan));
  runner.upload(plan);
  runner.poison_states();
  PagedAttentionArgs args;
  args.q = q.raw(), args.k_pool = k_pool.raw(), args.v_pool = v_pool.raw();
  args.out = out.raw(), args.out_lse = out_lse.data<float>();
  args.page_size = page_size;
  args.scale = options.scale.value_or(0.f);
  runner.run(args);
  HG_CUDA_CHECK(cudaDeviceSynchronize());
  return {out.to(Device::cpu).to(DType::f32), out_lse.to(Device::cpu)};
}

}  // namespace hydragen::cuda
