// The attention kernels as the runner sees them: one entry per kernel, each family's entries
// made by its own translation unit (shared_mma.cu, shared_wgmma.cu, shared_ws.cu, decode.cu,
// decode_quad.cu, split_merge.cu), so nvcc compiles the families apart. Making an entry
// raises its kernel's shared-memory limit and asks its occupancy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "hydragen/dtype.h"

namespace hydragen::cuda {

struct PagedAttentionParams;

// kernel<<<grid, ...>>>(p) on stream; dependent: as the programmatic dependent of the launch
// before it on the stream.
using LaunchFn = void (*)(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool dependent);

struct KernelEntry {
  LaunchFn launch = nullptr;
  int blocks_per_sm = 0;  // resident blocks per SM; 0: no code for this device or head dim
};

// make(std::type_identity<T>, std::integral_constant<int, D>) for the dtype's element type T
// (bf16, else fp16) and the head dim's D (64, 96, else 128: the runner checked it): the one
// switch of every family's entries.
template <class Make>
auto for_head_dim(DType dtype, int head_dim, Make&& make) {
  auto by_dim = [&](auto type) {
    if (head_dim == 64) return make(type, std::integral_constant<int, 64>{});
    if (head_dim == 96) return make(type, std::integral_constant<int, 96>{});
    return make(type, std::integral_constant<int, 128>{});
  };
  return dtype == DType::bf16 ? by_dim(std::type_identity<__nv_bfloat16>{}) : by_dim(std::type_identity<__half>{});
}

// The mma.sync shared kernel (every device, head dims 64, 96 and 128).
KernelEntry shared_mma_entry(DType dtype, int head_dim);
// The wgmma and warp-specialized shared kernels (head dim 128; absent without sm_90a code).
KernelEntry shared_wgmma_entry(DType dtype, int head_dim);
KernelEntry shared_ws_entry(DType dtype, int head_dim);

// The decode kernel's builds (DecodeBuild), and the quad and merge kernels: head dims 64, 96, 128.
struct DecodeEntries {
  KernelEntry general, narrow, four, eight;
};
DecodeEntries decode_entries(DType dtype, int head_dim);
KernelEntry decode_quad_entry(DType dtype, int head_dim);
// The merge launch after the decode kernel.
KernelEntry split_merge_entry(DType dtype, int head_dim);

// Launch geometry the runner sizes grids and the plan block by. The decode kernels' grids are
// whole: a warp (decode) or a quad (decode_quad) per suffix item, kDecodeItemsPerBlock
// (launch_choice.h) or kQuadItemsPerBlock items per block; the item array holds whole blocks
// of both (kSuffixItemsAlign: the decode kernel loads its item before checking the count).
// The merge launch is a persistent grid of kSplitMergeWarps-warp blocks, at most
// kSplitMergeBlocksPerSm per SM; the shared kernels' grids are persistent too.
inline constexpr int kQuadItemsPerBlock = 32;
inline constexpr int kSuffixItemsAlign = 32;
inline constexpr int kSplitMergeWarps = 4;
inline constexpr int kSplitMergeBlocksPerSm = 4;  // (<= 128 registers a thread: 16 warps fit an SM)

}  // namespace hydragen::cuda
