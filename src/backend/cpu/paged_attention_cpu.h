// The CPU twin of cuda::PagedAttentionRunner: executes an attention plan (src/plan/paged_plan.h)
// over an f32 page pool, item by item as the kernels do, so the engine's CPU runner and the
// GPU share one plan, and a test can hold one against the other on the same plan.
#pragma once

#include "plan/paged_plan.h"
#include "hydragen/tensor.h"

namespace hydragen::cpu {

// Executes an AttentionPlan exactly as the CUDA runner does (shared items -> partial states,
// suffix items -> partial states, then each merge group's merge into the final output), in f32.
// q f32 [query_rows, Hq, D]; k_pool, v_pool f32 [pages, page_size, Hkv, D] (contiguous);
// out f32 [query_rows, Hq, D] (written); out_lse optional f32 [query_rows, Hq]; scale 0 = 1/sqrt(D).
// Rows that attend no key get o = 0, lse = -inf. Items run on ThreadPool::global(), so this
// must not be called from inside one of its parallel_for bodies. Throws hydragen::Error naming
// the argument on a bad shape, and on a plan whose indices leave the tensors.
void run_attention_plan(const plan::AttentionPlan& plan, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                        Tensor& out, Tensor* out_lse = nullptr, float scale = 0.f);

// The plan options of the CPU's steps (the twin of cuda::plan_options_for_device): the
// defaults for `mode` (hydragen, paged or dense) and `causal`, split-KV filling the thread
// pool's workers rather than the H200's SMs.
plan::PlanOptions plan_options(AttentionMode mode, bool causal);

}  // namespace hydragen::cpu
