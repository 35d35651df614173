// Token sampling on the device: the twin of sample::sample_rows (src/sample/sampling.h, where
// the algorithm is written down). Host-only header: no CUDA types; the stream is a
// cudaStream_t passed as void* (nullptr: the default stream).
#pragma once

#include <cstdint>

#include "hydragen/tensor.h"
#include "sample/sampling.h"

namespace hydragen::cuda {

// Device arrays of one sampling call over `rows` rows.
struct SamplingArgs {
  const sample::SamplingParams* params = nullptr;  // [rows], each validated on the host (sample::validate)
  const std::uint64_t* steps = nullptr;            // [rows]
  // The penalties' inputs, all three or none (then rows with penalties are sampled without):
  // each row's input token [rows], and the history's offsets [rows + 1] and entries
  // (sample::TokenHistory, validated on the host). Read only for rows with penalties.
  const std::int32_t* input_tokens = nullptr;
  const std::int32_t* history_offsets = nullptr;
  const sample::TokenCount* history = nullptr;
  std::int32_t* tokens = nullptr;  // [rows]
  float* logprobs = nullptr;       // [rows]
  // [rows, kMaxTopLogprobs]: row r's top-N at its start (min(N, vocab) entries, the rest not
  // written); nullptr: no top-N.
  sample::TokenLogprob* top = nullptr;
  // [rows] or nullptr: the tokens once more (the next decode step's input tokens: the engine's
  // overlapped steps). May be input_tokens: a row's input is read before its token is written.
  std::int32_t* tokens_copy = nullptr;
};

// logits: contiguous CUDA f32 [rows, vocab]. One block per row. No allocation and no host
// synchronisation, so a CUDA graph can capture it and the caller may rewrite every array
// between replays (the pointers are what the graph keeps).
void sample_rows(const Tensor& logits, const SamplingArgs& args, void* stream = nullptr);

}  // namespace hydragen::cuda
