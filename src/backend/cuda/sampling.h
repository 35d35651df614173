// Token sampling on the device: the twin of sample::sample_rows (src/sample/sampling.h, where
// the algorithm is written down). Host-only header: no CUDA types; the stream is a
// cudaStream_t passed as void* (nullptr: the default stream).
#pragma once

#include <cstdint>

#include "hydragen/tensor.h"

namespace hydragen::cuda {

// logits: contiguous CUDA f32 [rows, vocab]. params: device array of `rows`
// sample::SamplingParams, each already validated on the host (sample::validate); steps:
// device u64 [rows]. Writes tokens i32 [rows] and logprobs f32 [rows] on the device, and the
// tokens once more to tokens_copy where given (the next decode step's input tokens: the engine's
// overlapped steps). One block per row. No allocation and no host synchronisation, so a CUDA
// graph can capture it and the caller may rewrite the params and steps buffers between replays.
void sample_rows(const Tensor& logits, const void* params, const std::uint64_t* steps, std::int32_t* tokens,
                 float* logprobs, void* stream = nullptr, std::int32_t* tokens_copy = nullptr);

}  // namespace hydragen::cuda
