// The warp-specialized TMA shared kernel's entries (shared_attention_ws.cuh): bf16 and fp16,
// head dim 128, where the build has sm_90a code for the device; and the TMA maps of the pools.
#include "backend/cuda/kernel_table.h"

#include <cudaTypedefs.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/shared_attention_ws.cuh"

namespace hydragen::cuda {
namespace {

// The TMA map of a [slots, kv_heads, 128] pool (slots = pages * page_size): boxes of 64 dims x
// 1 head x min(page_size, 64) slots, 128-byte swizzle.
CUtensorMap encode_kv_tensor_map(const void* pool, bool bf16, int kv_heads, int page_size) {
  // The driver's encoder, found once through the runtime (no link against libcuda).
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    HG_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    HG_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr, "paged attention: the CUDA driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  constexpr int D = 128;
  const cuuint64_t row_bytes = cuuint64_t{2} * D * kv_heads;  // one slot: every head's row
  // The slot extent only bounds the box coordinates (the pool's size is not passed down): as
  // many slots as int32 coordinates and 40-bit strides allow; page indices stay inside the pool.
  const cuuint64_t slots = std::min<cuuint64_t>((cuuint64_t{1} << 40) / row_bytes, INT32_MAX);
  const cuuint64_t dims[3] = {D, static_cast<cuuint64_t>(kv_heads), slots};
  const cuuint64_t strides[2] = {2 * D, row_bytes};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(std::min(page_size, 64))};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  CUtensorMap map{};
  const CUresult r = encode(&map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
                            const_cast<void*>(pool), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HG_CHECK(r == CUDA_SUCCESS, "paged attention: cuTensorMapEncodeTiled failed (", static_cast<int>(r), ") for a pool of ",
           kv_heads, " kv heads, page size ", page_size);
  return map;
}

template <class T>
void launch(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool dependent) {
  using Tile = WsSharedTile<T>;
  constexpr bool bf16 = std::is_same_v<T, __nv_bfloat16>;
  const CUtensorMap tk = encode_kv_tensor_map(p.k_pool, bf16, p.kv_heads, p.page_size);
  const CUtensorMap tv = encode_kv_tensor_map(p.v_pool, bf16, p.kv_heads, p.page_size);
  launch_kernel(shared_attention_ws_kernel<T>, grid, Tile::kThreads, Tile::kSmemBytes, stream, dependent, p, tk, tv);
}

template <class T>
KernelEntry entry() {
  using Tile = WsSharedTile<T>;
  const int blocks = prepare_sm90_kernel(shared_attention_ws_kernel<T>, Tile::kThreads, Tile::kSmemBytes);
  return {blocks > 0 ? launch<T> : nullptr, blocks};
}

}  // namespace

KernelEntry shared_ws_entry(DType dtype, int head_dim) {
  if (head_dim != 128) return {};
  return dtype == DType::bf16 ? entry<__nv_bfloat16>() : entry<__half>();
}

}  // namespace hydragen::cuda
