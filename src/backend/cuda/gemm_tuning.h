// GEMMs through cuBLASLt with the algorithm for each shape chosen once by timing the
// candidates cuBLASLt's heuristic offers (opt-in: HYDRAGEN_GEMM_TUNE=1).
//
// Opt-in because the choice comes from timing: two processes may pick different algorithms
// for a shape and so round differently (the same seed could then give other tokens), and it
// has not yet been measured against cuBLAS's default choice (docs/perf-notes.md, e3).
#pragma once

#include <cstdint>

namespace hydragen::cuda {

// Whether HYDRAGEN_GEMM_TUNE asks for tuned GEMMs (read once per process).
bool gemm_tuning_enabled();

// out[rows, n] = x[rows, in] . w[n, in]^T, row-major bf16 x and w, out bf16 or f32 (out_f32),
// fp32 accumulation. A shape seen for the first time is tuned on these operands (it runs every
// candidate a few times and synchronises the stream, so `out` is overwritten along the way);
// during stream capture an untuned shape cannot be timed and the call returns false without
// enqueueing anything, so the caller runs its default GEMM instead. Returns true when the GEMM
// was enqueued on `stream`.
bool tuned_gemm(const void* x, const void* w, void* out, bool out_f32, std::int64_t rows, std::int64_t n,
                std::int64_t in, void* stream);

}  // namespace hydragen::cuda
