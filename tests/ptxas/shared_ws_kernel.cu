// The TMA shared-segment kernel (the default on sm_90a) alone, for ptxas's verdict on it:
// tests/CMakeLists.txt compiles this file for sm_90a and fails when ptxas serializes its wgmmas
// (C7514 / C7515: a non-wgmma instruction reads / writes an accumulator while a wgmma may be in
// flight; see perf-notes: v35), injects a wait of its own (C7517), or spills registers. These
// show only in the compiler's output, never in a test's result.
#include "backend/cuda/shared_attention_ws.cuh"

namespace hydragen::cuda {
template __global__ void shared_attention_ws_kernel<__nv_bfloat16>(const PagedAttentionParams,
                                                                    const __grid_constant__ CUtensorMap,
                                                                    const __grid_constant__ CUtensorMap);
}  // namespace hydragen::cuda
