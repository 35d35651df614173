// The mma.sync shared kernel's entries (shared_mma.cuh), bf16 and fp16, head dims 64, 96 and 128.
#include "backend/cuda/kernel_table.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/shared_mma.cuh"

namespace hydragen::cuda {
namespace {

template <class T, int D>
void launch(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool dependent) {
  using Tile = MmaSharedTile<T, D>;
  launch_kernel(shared_mma_kernel<T, D>, grid, Tile::kThreads, Tile::kSmemBytes, stream, dependent, p);
}

template <class T, int D>
KernelEntry entry() {
  using Tile = MmaSharedTile<T, D>;
  auto kernel = shared_mma_kernel<T, D>;
  HG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  int blocks = 0;
  HG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Tile::kThreads, Tile::kSmemBytes));
  HG_CHECK(blocks > 0, "paged attention: the mma.sync shared kernel does not fit on this device (", Tile::kSmemBytes,
           " bytes of shared memory)");
  return {launch<T, D>, blocks};
}

}  // namespace

KernelEntry shared_mma_entry(DType dtype, int head_dim) {
  return for_head_dim(dtype, head_dim, [](auto t, auto d) { return entry<typename decltype(t)::type, decltype(d)::value>(); });
}

}  // namespace hydragen::cuda
