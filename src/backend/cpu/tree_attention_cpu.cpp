// Tree attention on the CPU the way the engine's CPU steps run it: the tree paged into an f32
// pool (plan::page_tree), planned with the CPU runner's options, run by run_attention_plan.
#include <algorithm>
#include <limits>

#include "backend/cpu/cpu_attention.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/paged_attention_cpu.h"
#include "core/thread_pool.h"
#include "plan/tree_pages.h"

namespace hydragen::cpu {

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
}  // namespace

TreePool pool_tree(const SharingTree& tree, std::int64_t q_heads, int page_size, bool own_context_copies) {
  plan::TreePages paged = plan::page_tree(tree, q_heads, page_size, own_context_copies);
  const std::int64_t pages = std::max<std::int64_t>(paged.pages, 1), kv_heads = tree.kv_heads(), d = tree.head_dim();
  const std::int64_t page_floats = page_size * kv_heads * d;
  TreePool pool{std::move(paged.layout), Tensor::empty({pages, page_size, kv_heads, d}, DType::f32),
                Tensor::empty({pages, page_size, kv_heads, d}, DType::f32)};
  ThreadPool::global().parallel_for(pages, [&](std::int64_t p) {
    for (Tensor* t : {&pool.k, &pool.v}) std::fill_n(t->data<float>() + p * page_floats, page_floats, kNaN);
  });
  ThreadPool::global().parallel_for(static_cast<std::int64_t>(paged.copies.size()), [&](std::int64_t i) {
    const plan::TreePages::Copy& copy = paged.copies[static_cast<std::size_t>(i)];
    copy_rows(*copy.k, pool.k.data<float>() + copy.slot * kv_heads * d);
    copy_rows(*copy.v, pool.v.data<float>() + copy.slot * kv_heads * d);
  });
  return pool;
}

AttentionState tree_attention(const SharingTree& tree, const Tensor& q, const TreeAttentionOptions& options) {
  const std::int64_t rows = q.size(0), q_heads = q.size(1), d = q.size(2);
  const TreePool pool = pool_tree(tree, q_heads, options.page_size, options.mode == AttentionMode::dense);
  const plan::AttentionPlan plan = plan::build_attention_plan(pool.layout, plan_options(options.mode, options.causal));
  const Tensor q32 = q.dtype() == DType::f32 && q.is_contiguous() ? q : contiguous_copy(q, DType::f32);
  AttentionState out{Tensor::empty({rows, q_heads, d}, DType::f32), Tensor::empty({rows, q_heads}, DType::f32)};
  for (Tensor* t : {&out.o, &out.lse}) std::fill_n(t->data<float>(), t->numel(), kNaN);  // every row must be written
  run_attention_plan(plan, q32, pool.k, pool.v, out.o, &out.lse, options.scale.value_or(0.f));
  return out;
}

}  // namespace hydragen::cpu
