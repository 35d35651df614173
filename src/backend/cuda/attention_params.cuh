// What every attention kernel of a step shares: the parameter struct (the plan's device arrays,
// the step's tensors), the pool-slot lookups, the decode kernels' item load, and the
// programmatic-dependent-launch helpers with the host launch that uses them.
#pragma once

#include <cstdint>

#include "plan/paged_plan.h"
#include "backend/cuda/attention_state.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernel_table.h"
#include "backend/cuda/mma.cuh"

namespace hydragen::cuda {

struct PagedAttentionParams {
  const void* q;  // [query_rows, Hq, D]
  const void* k_pool;  // [pages, page_size, Hkv, D]
  const void* v_pool;
  const std::int32_t* pages;
  const plan::PlanPiece* pieces;
  const plan::PlanRow* rows;
  const plan::PlanItem* items;
  const plan::PlanMergeGroup* groups;
  const plan::PlanMergeRow* merge_rows;
  const std::int32_t* item_count;  // on the device: the plan changes without relaunching
  const std::int32_t* merge_row_count;  // (on the device too)
  std::int32_t* group_arrivals;    // zero between launches; the last arrival resets it
  StateBuffer states;
  void* out;       // [query_rows, Hq, D]
  float* out_lse;  // [query_rows, Hq]
  int page_size, page_shift, kv_heads, q_heads;  // page_size = 1 << page_shift
  float scale_log2;
  float rescale_lag;  // the shared kernels' lazy rescaling (online_softmax_step; KernelOverrides::rescale_lag)
  // The TMA shared kernel runs as the programmatic dependent of the launch before it, which
  // writes q (PagedAttentionArgs::q_from_previous_launch): it reads q only after
  // wait_for_previous_launch, and lets its own dependents start only after that.
  int q_after_wait;
  // The decode kernel leaves its split merge groups (items > 1) to the merge launch after it
  // (split_merge_kernel, decode_merge.cuh): their items write their states and return, no
  // ticket, and every block lets that launch start (allow_dependent_launch).
  int merge_launch;
};

// Pool token slot of token `tok` of a piece's page list (its page looked up in p.pages). 32
// bits: a pool of 2^31 token slots would hold 2^31 * Hkv * D * 2 bytes per K.
__device__ __forceinline__ int pool_slot(const PagedAttentionParams& p, const plan::PlanPiece& piece, int tok) {
  return (__ldg(p.pages + piece.page_offset + (tok >> p.page_shift)) << p.page_shift) + (tok & (p.page_size - 1));
}
// Pool token slot of the piece's key `key` (counted from its first): from the piece's slot
// where it lies in one page (no page-list read: the suffix kernels' first keys come one round
// trip sooner; see perf-notes: v31), else through p.pages.
__device__ __forceinline__ int piece_key_slot(const PagedAttentionParams& p, const plan::PlanPiece& piece, int key) {
  return piece.slot >= 0 ? piece.slot + key : pool_slot(p, piece, piece.token_begin + key);
}

// The decode kernel's item, loaded beside the plan's item count instead of after it: one
// memory round trip less before the item's first keys. The suffix item array
// holds whole blocks of every suffix grid (PlanBlockLayout rounds its capacity up to
// kSuffixItemsAlign), so any index of the grid is inside it; the item is used only when the
// return is true. The empty volatile asm consumes the loaded fields, so they stay above the
// caller's check (the compiler would otherwise sink them below it).
__device__ __forceinline__ bool load_suffix_item(const PagedAttentionParams& p, int index, plan::PlanItem& it) {
  const int count = *p.item_count;
  it = p.items[index];
  asm volatile("" ::"r"(it.kv_head), "r"(it.piece_begin), "r"(it.piece_count), "r"(it.row_begin), "r"(it.row_count),
               "r"(it.column), "r"(it.group));
  return index < count;
}

// Programmatic dependent launch (sm_90; no-ops elsewhere and under a plain launch). The
// runner launches the suffix kernel as a dependent of the shared launch where the shared items
// leave half of the SMs idle (pdl_rule in launch_choice.h; see perf-notes: v23c):
// the shared kernels let it start as soon as each of their blocks runs
// (allow_dependent_launch), so its blocks fill SMs that the shared grid leaves idle; every
// suffix kernel calls wait_for_shared_launch before it reads a partial state or writes
// anything, which returns once the shared grid has finished and its writes are visible (the
// decode kernel streams its keys first).
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_shared_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// The same wait, where the kernel is the dependent of the launch before the attention (the
// TMA shared kernel after RoPE): that launch's writes are complete and visible after it.
__device__ __forceinline__ void wait_for_previous_launch() { wait_for_shared_launch(); }

// kernel(args...) on `stream`; dependent: as the programmatic dependent of the launch before
// it on the stream (the suffix launch after the shared one, the shared one after RoPE).
template <class Kernel, class... Args>
void launch_kernel(Kernel kernel, int grid, int threads, int smem_bytes, cudaStream_t stream, bool dependent,
                   const Args&... args) {
  if (!dependent) {
    kernel<<<grid, threads, smem_bytes, stream>>>(args...);
    return;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<std::size_t>(smem_bytes);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  HG_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

}  // namespace hydragen::cuda
