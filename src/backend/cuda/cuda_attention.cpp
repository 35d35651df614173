// hydragen::cuda::tree_attention: page the tree on the device, plan, run. See cuda_attention.h.
#include "backend/cuda/cuda_attention.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/paged_attention_runner.h"
#include "plan/tree_pages.h"

namespace hydragen::cuda {
namespace {

// The pools and runners a thread's calls reuse, so that a call allocates nothing once they
// have grown to its size. Kept for the thread's life like linear's cuBLAS handle, and never
// freed: at exit the CUDA runtime may be gone before a thread_local's destructor would run.
struct Workspace {
  Tensor k_pool, v_pool;  // flat 16-bit elements: the largest pool yet
  struct Kept {
    PlanCapacity capacity;
    std::unique_ptr<PagedAttentionRunner> runner;
  };
  // By (dtype, head dim, q heads, kv heads): what a runner is built for.
  std::map<std::tuple<DType, int, int, int>, Kept> runners;
};

Workspace& workspace() {
  thread_local Workspace* kept = new Workspace;
  return *kept;
}

// A pool of at least `elements` 16-bit elements; a larger one replaces the last.
void* pool_of(Tensor& pool, std::int64_t elements) {
  if (!pool.defined() || pool.numel() < elements)
    pool = Tensor::empty({std::max(elements, pool.defined() ? pool.numel() + pool.numel() / 2 : 0)}, DType::bf16,
                         Device::cuda);
  return pool.raw();
}

// The runner for this shape whose buffers hold `need`: the kept one, or a larger one.
PagedAttentionRunner& runner_for(DType dtype, int head_dim, int q_heads, int kv_heads, const PlanCapacity& need) {
  Workspace::Kept& kept = workspace().runners[{dtype, head_dim, q_heads, kv_heads}];
  if (!kept.runner || !kept.capacity.holds(need)) {
    auto grow = [](std::int64_t v) { return std::max<std::int64_t>(64, v + v / 2); };
    kept.capacity = kept.capacity.max({grow(need.pages), grow(need.pieces), grow(need.rows), grow(need.shared_items),
                                       grow(need.suffix_items), grow(need.groups), grow(need.state_entries),
                                       grow(need.merge_rows)});
    kept.runner.reset();  // its buffers go before the larger ones come
    kept.runner = std::make_unique<PagedAttentionRunner>(dtype, head_dim, q_heads, kv_heads, kept.capacity);
  }
  return *kept.runner;
}

// Device K/V are copied as they are: q's dtype, each token's [Hkv, d] contiguous.
void check_device_kv(const Tensor& t, DType dtype, const std::string& name) {
  if (t.device() != Device::cuda) return;
  HG_CHECK(t.dtype() == dtype, "tree_attention: ", name, " is ", dtype_name(t.dtype()), " on cuda, expected ",
           dtype_name(dtype), " (q's dtype: K/V on the device are copied, not converted)");
  HG_CHECK((t.size(2) == 1 || t.stride(2) == 1) && (t.size(1) == 1 || t.stride(1) == t.size(2)) &&
               (t.size(0) <= 1 || t.stride(0) >= t.size(1) * t.size(2)),
           "tree_attention: ", name, " ", t.shape_str(), " on cuda has strides [", t.stride(0), ", ", t.stride(1), ", ",
           t.stride(2), "], expected each token's [Hkv, d] contiguous");
}

// Tokens [0, len) of `src` into the pool from `slot` on: on the device a strided copy on the
// legacy stream; from the host, converted there and copied (returns once it has read them).
void copy_run(const Tensor& src, void* pool, std::int64_t slot, DType dtype) {
  const std::int64_t tokens = src.size(0);
  if (tokens == 0) return;
  const std::size_t row_bytes = static_cast<std::size_t>(src.size(1) * src.size(2)) * dtype_bytes(dtype);
  unsigned char* dst = static_cast<unsigned char*>(pool) + slot * row_bytes;
  if (src.device() == Device::cuda) {
    const std::size_t pitch = tokens == 1 ? row_bytes : static_cast<std::size_t>(src.stride(0)) * dtype_bytes(dtype);
    HG_CUDA_CHECK(cudaMemcpy2DAsync(dst, row_bytes, src.raw(), pitch, row_bytes, static_cast<std::size_t>(tokens),
                                    cudaMemcpyDeviceToDevice, nullptr));
    return;
  }
  const Tensor host = src.dtype() == dtype && src.is_contiguous() ? src : src.to(dtype);
  HG_CUDA_CHECK(cudaMemcpy(dst, host.raw(), tokens * row_bytes, cudaMemcpyHostToDevice));
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

AttentionState tree_attention(const SharingTree& tree, const Tensor& q, const TreeAttentionOptions& options) {
  HG_CHECK(q.device() == Device::cuda, "cuda::tree_attention: q must be a CUDA tensor");
  const DType dtype = q.dtype();
  HG_CHECK(dtype == DType::bf16 || dtype == DType::f16, "tree_attention: q is ", dtype_name(dtype),
           " on cuda, expected bf16 or f16");
  HG_CHECK(q.rank() == 3 && q.is_contiguous(), "tree_attention: q must be contiguous [query_rows, Hq, d] on cuda, got ",
           q.shape_str(), q.is_contiguous() ? "" : " (strided)");
  const std::int64_t rows = q.size(0), hq = q.size(1), d = q.size(2), hkv = tree.kv_heads();
  HG_CHECK(supported_head_dim(static_cast<int>(d)), "tree_attention: head_dim ", d,
           " is not supported on CUDA (supported: ", supported_head_dims(), ")");
  for (std::size_t i = 0; i < tree.segments.size(); ++i) {
    check_device_kv(tree.segments[i].k, dtype, "segment " + std::to_string(i) + " k");
    check_device_kv(tree.segments[i].v, dtype, "segment " + std::to_string(i) + " v");
  }
  for (std::size_t s = 0; s < tree.sequences.size(); ++s) {
    check_device_kv(tree.sequences[s].k, dtype, "sequence " + std::to_string(s) + " suffix k");
    check_device_kv(tree.sequences[s].v, dtype, "sequence " + std::to_string(s) + " suffix v");
  }

  const int page_size = options.page_size;
  const plan::TreePages paged = plan::page_tree(tree, hq, page_size, options.mode == AttentionMode::dense);
  const plan::PlanOptions plan_options = plan_options_for_device(dtype, static_cast<int>(d), options.mode, options.causal);
  const plan::AttentionPlan plan = plan::build_attention_plan(paged.layout, plan_options);

  // The pools: NaN (all ones) in every slot no run fills, so a plan that reads one shows; then the runs.
  Workspace& w = workspace();
  const std::int64_t pool_elements = std::max<std::int64_t>(paged.pages, 1) * page_size * hkv * d;
  void* k_pool = pool_of(w.k_pool, pool_elements);
  void* v_pool = pool_of(w.v_pool, pool_elements);
  HG_CUDA_CHECK(cudaMemsetAsync(k_pool, 0xff, pool_elements * 2, nullptr));
  HG_CUDA_CHECK(cudaMemsetAsync(v_pool, 0xff, pool_elements * 2, nullptr));
  for (const plan::TreePages::Copy& copy : paged.copies) {
    copy_run(*copy.k, k_pool, copy.slot, dtype);
    copy_run(*copy.v, v_pool, copy.slot, dtype);
  }

  PagedAttentionRunner& runner = runner_for(dtype, static_cast<int>(d), static_cast<int>(hq), static_cast<int>(hkv),
                                            PlanCapacity::of(plan));
  runner.upload(plan, cudaStreamLegacy);  // asynchronous on the legacy stream (nullptr would copy synchronously)
  runner.poison_states();                 // NaN: every partial state merged must have been written
  AttentionState out{Tensor::empty({rows, hq, d}, dtype, Device::cuda), Tensor::empty({rows, hq}, DType::f32, Device::cuda)};
  HG_CUDA_CHECK(cudaMemsetAsync(out.o.raw(), 0xff, out.o.bytes(), nullptr));  // NaN: every output must be written
  HG_CUDA_CHECK(cudaMemsetAsync(out.lse.raw(), 0xff, out.lse.bytes(), nullptr));
  PagedAttentionArgs args;
  args.q = q.raw(), args.k_pool = k_pool, args.v_pool = v_pool;
  args.out = out.o.raw(), args.out_lse = out.lse.data<float>();
  args.page_size = page_size;
  args.scale = options.scale.value_or(0.f);
  runner.run(args);
  return out;
}

}  // namespace hydragen::cuda
