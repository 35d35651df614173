// The decode kernel's entries (decode_attention.cuh): its four builds (DecodeBuild), bf16 and
// fp16, head dims 64, 96 and 128.
#include "backend/cuda/kernel_table.h"

#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/launch_choice.h"

namespace hydragen::cuda {
namespace {

static_assert(DecodeShape<__half, 128>::kWarps == kDecodeItemsPerBlock);

template <class T, int D, int MinBlocks, int Rows>
void launch(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool dependent) {
  using Shape = DecodeShape<T, D>;
  launch_kernel(decode_attention_kernel<T, D, MinBlocks, Rows>, grid, Shape::kThreads,
                Shape::smem_bytes(Shape::layout_rows(Rows)), stream, dependent, p);
}

template <class T, int D, int MinBlocks, int Rows>
KernelEntry entry() {
  using Shape = DecodeShape<T, D>;
  auto kernel = decode_attention_kernel<T, D, MinBlocks, Rows>;
  constexpr int bytes = Shape::smem_bytes(Shape::layout_rows(Rows));
  HG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  int blocks = 0;
  HG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Shape::kThreads, bytes));
  HG_CHECK(blocks > 0, "paged attention: the decode kernel does not fit on this device");
  return {launch<T, D, MinBlocks, Rows>, blocks};
}

// MinBlocks: what shared memory allows, 2 for the multi-row builds and 3 for the narrow one.
template <class T, int D>
DecodeEntries entries() {
  const DecodeEntries e{entry<T, D, 2, 0>(), entry<T, D, 3, 1>(), entry<T, D, 2, 4>(), entry<T, D, 2, 8>()};
  // The suffix slots (plan options) are counted from the general build's occupancy; the
  // one-path builds fit at least as many blocks (fewer registers, the same shared memory).
  for (const auto& [rows, build] : {std::pair{4, e.four}, std::pair{8, e.eight}})
    HG_CHECK(build.blocks_per_sm >= e.general.blocks_per_sm, "paged attention: the decode kernel's ", rows,
             "-row build fits ", build.blocks_per_sm, " blocks per SM, fewer than the general build's ",
             e.general.blocks_per_sm);
  return e;
}

}  // namespace

DecodeEntries decode_entries(DType dtype, int head_dim) {
  return for_head_dim(dtype, head_dim, [](auto t, auto d) { return entries<typename decltype(t)::type, decltype(d)::value>(); });
}

}  // namespace hydragen::cuda
