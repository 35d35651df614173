// The quad decode kernel's entries (decode_quad.cuh): bf16 and fp16, head dims 64, 96 and 128.
#include "backend/cuda/kernel_table.h"

#include "backend/cuda/decode_quad.cuh"

namespace hydragen::cuda {
namespace {

template <class T, int D>
void launch(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool dependent) {
  launch_kernel(decode_quad_kernel<T, D>, grid, QuadShape<T, D>::kThreads, 0, stream, dependent, p);
}

}  // namespace

KernelEntry decode_quad_entry(DType dtype, int head_dim) {
  constexpr int kBlocks = QuadShape<__half, 128>::kMinBlocks;  // (its launch bounds)
  return for_head_dim(dtype, head_dim, [](auto t, auto d) {
    return KernelEntry{launch<typename decltype(t)::type, decltype(d)::value>, kBlocks};
  });
}

}  // namespace hydragen::cuda
