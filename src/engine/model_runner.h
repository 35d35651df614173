// ModelRunner: the engine's one door to a model on a device. A step takes rows (new tokens,
// their positions and K/V slots), the attention plan over the runner's page pool, and, for a
// decode step, one sampling row per sequence; it returns the sampled tokens. The CPU runner
// is the Llama fp32 forward pass with the plan executed by cpu::run_attention_plan; the CUDA
// runner is its bf16 twin with CUDA graphs (engine/cuda_model_runner.cpp).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
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
  std::int64_t max_batch = 1024;     // decode rows a step may hold (CUDA graph buckets up to it)
  bool cuda_graphs = true;
};

// A decode step's sampling: params and the generation step of each row (the random stream),
// and the penalty history of each row (sample::HeldTokens; rows without penalties hold
// none). Rows' input tokens (StepRows::tokens) complete the history.
struct StepSampling {
  std::vector<sample::SamplingParams> params;
  std::vector<std::uint64_t> steps;
  sample::TokenHistory history;
};
struct SampledTokens {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
  // Row r's top-N (N = its params' logprobs), most likely first: top[r * kMaxTopLogprobs + j]
  // for j < min(N, vocab). Empty when no row of the step asked for any.
  std::vector<sample::TokenLogprob> top;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int page_size() const = 0;
  virtual std::int64_t kv_pages() const = 0;
  virtual std::int64_t kv_bytes_per_token() const = 0;
  virtual std::string device_name() const = 0;
  // Most rows one step may hold (prefill chunks are cut to it).
  virtual std::int64_t max_step_rows() const = 0;
  // Plan options the device's kernels want (split-KV slots, tile rows).
  virtual plan::PlanOptions plan_options(AttentionMode mode) const = 0;
  // Runs one step. plan == nullptr: attention skipped (`none`). With `sampling` (one entry
  // per row) returns one sampled token per row; without, only writes K/V (prefill).
  // while_running (may be empty): host work done while the device runs the step (the engine
  // builds the next step's plan there); a runner that computes on the host calls it after.
  // plan_prepared: `plan` is the one last handed to prepare_plan, with no step in between.
  virtual SampledTokens step(const StepRows& rows, const plan::AttentionPlan* plan, const StepSampling* sampling,
                             const std::function<void()>& while_running, bool plan_prepared) = 0;
  // From a step's while_running: the plan the next step gets if nobody finishes or joins. A
  // runner may do that plan's host-side upload work now (the CUDA runner packs it into pinned
  // staging); the next step says with plan_prepared whether its plan is this one.
  virtual void prepare_plan(const plan::AttentionPlan& plan) { (void)plan; }
  // Overlapped decode (EngineOptions::overlap_steps). launch_decode enqueues a decode step
  // and may return before it has run; collect_decode waits for the oldest step launched and
  // not yet collected and returns its tokens. With tokens_from_last, row r's input token is
  // the one the step launched just before sampled for its row r (it had the same rows, in the
  // same order; rows.tokens is not read): a step can follow the last before its tokens reach
  // the host. At most two steps are launched and not collected, and step() is called only
  // when none is. The default runs step() at once and keeps its tokens (a runner that
  // computes on the host).
  virtual void launch_decode(const StepRows& rows, const plan::AttentionPlan* plan, const StepSampling& sampling,
                             bool tokens_from_last);
  virtual SampledTokens collect_decode();
  // K/V of slot src[i] copied to slot dst[i] in every layer (the dense mode's own copies).
  virtual void copy_slots(std::span<const std::int32_t> src, std::span<const std::int32_t> dst) = 0;
  // Seconds of device time of the last step when the runner can tell (CUDA events), else -1;
  // with launch_decode, of the step collected last.
  virtual double last_step_device_seconds() const { return -1; }
  // Whether decode steps replay captured CUDA graphs (they have, and capture has not failed).
  virtual bool decodes_with_graphs() const { return false; }

 private:
  std::deque<SampledTokens> launched_;  // the default launch_decode's steps, not collected
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
