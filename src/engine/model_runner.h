// ModelRunner: the engine's one door to a model on a device. A step takes rows (new tokens,
// their positions and K/V slots), the attention plan over the runner's page pool, and one
// sampling row per decode row; launch enqueues it, collect returns its sampled tokens. The CPU
// runner is the Llama fp32 forward pass with the plan executed by cpu::run_attention_plan; the
// CUDA runner is its bf16 twin with CUDA graphs (engine/cuda_model_runner.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plan/paged_plan.h"
#include "model/model_config.h"
#include "model/paged_kv.h"
#include "model/weights.h"
#include "sample/sampling.h"

namespace hydragen::engine {

inline constexpr std::int64_t kCpuKvBytes = std::int64_t{1} << 30;  // the CPU runner's default K/V pool
// Left free after the CUDA runner's pool: cuBLAS workspace, plan buffers and partial states,
// graphs. At batch 1024 these take ~0.5 GB; a 13B model at prefix 16K needs all but ~1.5 GB for K/V.
inline constexpr std::int64_t kCudaKvReserveBytes = std::int64_t{5} << 28;  // 1.25 GiB

struct RunnerOptions {
  int page_size = 64;
  std::int64_t kv_pages = 0;         // 0: from kv_memory_bytes
  std::int64_t kv_memory_bytes = 0;  // 0: the device's free memory after weights, less a reserve (CUDA); kCpuKvBytes (CPU)
  std::int64_t max_batch = 1024;     // decode rows a step may sample (CUDA graph buckets up to it)
  // Rows one step may hold, prefill rows included (the CUDA runner's activation buffers; its
  // logits hold max_batch rows). 0: max(max_batch, 512).
  std::int64_t max_step_rows = 0;
  bool cuda_graphs = true;
};

// A step's sampling: params and the generation step of each sampled row (the random stream),
// and the penalty history of each row (sample::HeldTokens; rows without penalties hold
// none). Rows' input tokens (StepRows::tokens, or the fed tokens) complete the history.
struct StepSampling {
  std::vector<sample::SamplingParams> params;
  std::vector<std::uint64_t> steps;
  sample::TokenHistory history;
  std::int64_t size() const { return static_cast<std::int64_t>(params.size()); }
};
struct SampledTokens {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
  // Row r's top-N (N = its params' logprobs), most likely first: top[r * kMaxTopLogprobs + j]
  // for j < min(N, vocab). Empty when no row of the step asked for any.
  std::vector<sample::TokenLogprob> top;
};

// One forward step: the decode rows first (each sampled: one `sampling` entry per row, in
// order), then the prefill rows (K/V written, no logits). Rows [0, fed_from.size()) take as
// input token the one that the step launched just before sampled for its row fed_from[r]
// (rows.tokens is not read there), so a step can follow the last one before its tokens reach
// the host. No plan: attention skipped (`none`).
struct StepWork {
  StepRows rows;
  std::optional<plan::AttentionPlan> plan;
  StepSampling sampling;
  std::vector<std::int32_t> fed_from;
  bool has_prefill_rows() const { return rows.size() > sampling.size(); }
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int page_size() const = 0;
  virtual std::int64_t kv_pages() const = 0;
  virtual std::int64_t kv_bytes_per_token() const = 0;
  virtual std::string device_name() const = 0;
  // Most rows one step may hold, and most of them sampled.
  virtual std::int64_t max_step_rows() const = 0;
  virtual std::int64_t max_sampled_rows() const { return max_step_rows(); }
  // Plan options the device's kernels want (split-KV slots, tile rows).
  virtual plan::PlanOptions plan_options(AttentionMode mode) const = 0;
  // launch enqueues a step and may return before it has run; collect waits for the oldest
  // step launched and not collected and returns its sampled tokens (none for a step without
  // sampled rows). At most two steps are launched and not collected; fed_from is non-empty
  // only while the step launched last is one of them.
  virtual void launch(const StepWork& step) = 0;
  virtual SampledTokens collect() = 0;
  // K/V of slot src[i] copied to slot dst[i] in every layer (a sequence's copy of its prompt),
  // after every step launched before it and before every step launched after it.
  virtual void copy_slots(std::span<const std::int32_t> src, std::span<const std::int32_t> dst) = 0;
  // Seconds of device time of the step collected last when the runner can tell (CUDA events), else -1.
  virtual double last_step_device_seconds() const { return -1; }
  // Whether decode steps replay captured CUDA graphs (they have, and capture has not failed).
  virtual bool decodes_with_graphs() const { return false; }
};

// A runner that computes on the host: launch runs the step at once (its fed tokens taken from
// the last step's) and keeps the tokens for collect.
class HostModelRunner : public ModelRunner {
 public:
  void launch(const StepWork& step) final;
  SampledTokens collect() final;

 protected:
  // Runs `rows` (input tokens resolved) and samples the first sampling.size() rows.
  virtual SampledTokens compute(const StepRows& rows, const plan::AttentionPlan* plan,
                                const StepSampling& sampling) = 0;

 private:
  std::deque<SampledTokens> launched_;  // not collected
  std::vector<std::int32_t> last_tokens_;  // of the step launched last
};

// The fp32 CPU runner over `weights` (f32 CPU tensors).
std::unique_ptr<ModelRunner> make_cpu_runner(const ModelConfig& config, LlamaWeights weights,
                                             const RunnerOptions& options);
// The bf16 CUDA runner (weights of any float dtype, CPU or device; bf16 device weights are
// used in place). The KV pool is sized after `weights` is released, so pass it by move to
// give its memory to the pool. Throws in builds without CUDA.
std::unique_ptr<ModelRunner> make_cuda_runner(const ModelConfig& config, LlamaWeights weights,
                                              const RunnerOptions& options);

// Pages for a memory budget: budget / (page_size tokens x bytes per token), at least 1.
std::int64_t pages_for_bytes(std::int64_t bytes, int page_size, std::int64_t bytes_per_token);

// The K/V pool's pages for `options`: kv_pages when set; else kv_memory_bytes when set; else,
// on a device (free_bytes >= 0: its free memory after the weights), that memory less
// reserve_bytes, and on the CPU (free_bytes < 0) kCpuKvBytes. On a device an asked size must
// fit what is free less the reserve, and too little free memory is an error that says how
// much there is. Capped so that every slot (one sink page more) fits the plans' int32 slots.
std::int64_t kv_pool_pages(const RunnerOptions& options, std::int64_t bytes_per_token, std::int64_t free_bytes,
                           std::int64_t reserve_bytes);

}  // namespace hydragen::engine
