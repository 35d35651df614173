// The wgmma shared kernel's entries (shared_attention.cuh): bf16 and fp16, head dim 128, where
// the build has sm_90a code for the device.
#include "backend/cuda/kernel_table.h"

#include "backend/cuda/shared_attention.cuh"

namespace hydragen::cuda {
namespace {

template <class T>
void launch(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool dependent) {
  using Tile = WgmmaSharedTile<T>;
  launch_kernel(shared_attention_wgmma_kernel<T>, grid, Tile::kThreads, Tile::kSmemBytes, stream, dependent, p);
}

template <class T>
KernelEntry entry() {
  using Tile = WgmmaSharedTile<T>;
  const int blocks = prepare_sm90_kernel(shared_attention_wgmma_kernel<T>, Tile::kThreads, Tile::kSmemBytes);
  return {blocks > 0 ? launch<T> : nullptr, blocks};
}

}  // namespace

KernelEntry shared_wgmma_entry(DType dtype, int head_dim) {
  if (head_dim != 128) return {};
  return dtype == DType::bf16 ? entry<__nv_bfloat16>() : entry<__half>();
}

}  // namespace hydragen::cuda
