// Host side of the paged attention step: device buffers of fixed capacity for the plan,
// `upload` (host -> device, between steps) and `run` (two launches, three with the merge launch;
// no allocation, no host synchronisation: capturable in a CUDA graph that keeps working after the
// next upload). Which kernels run a plan: launch_choice.h.
// No CUDA types here, so g++ code (tests, the tree_attention entry point) can use it.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cuda/launch_choice.h"
#include "hydragen/dtype.h"
#include "plan/paged_plan.h"

namespace hydragen::cuda {

// Sizes of the plan arrays a runner can hold.
struct PlanCapacity {
  std::int64_t pages = 0, pieces = 0, rows = 0, shared_items = 0, suffix_items = 0, groups = 0,
               state_entries = 0, merge_rows = 0;
  static PlanCapacity of(const plan::AttentionPlan& plan);
  PlanCapacity max(const PlanCapacity& other) const;
  // Whether every size of `need` fits this capacity.
  bool holds(const PlanCapacity& need) const;
};

// Device pointers of one step's tensors.
struct PagedAttentionArgs {
  const void* q = nullptr;       // [query_rows, Hq, D], the runner's dtype
  const void* k_pool = nullptr;  // [pages, page_size, Hkv, D]
  const void* v_pool = nullptr;
  void* out = nullptr;        // [query_rows, Hq, D]
  float* out_lse = nullptr;   // [query_rows, Hq]
  int page_size = 64;
  float scale = 0;            // 0: 1/sqrt(D)
  // The launch just before run() on the stream wrote q (and K/V only at slots no stacked
  // segment of the plan holds) and called griddepcontrol.launch_dependents: the TMA shared
  // kernel then starts as that launch's programmatic dependent and waits for it only before it
  // reads q (see perf-notes: v28). The engine's forward sets it after rope_append_kv.
  bool q_from_previous_launch = false;
};

// Head dims with compiled kernels (64, 96, 128; the wgmma and warp-specialized shared kernels
// 128 only, the mma.sync one otherwise); others throw from the runner's constructor.
bool supported_head_dim(int head_dim);
// The supported head dims as errors list them: "64, 96, 128".
const char* supported_head_dims();

// The kernels this device and build can run for dtype (bf16 or f16) and head_dim.
DeviceKernels device_kernels(DType dtype, int head_dim);
// plan_options_for(device_kernels(dtype, head_dim), ...): the plan options for this device.
plan::PlanOptions plan_options_for_device(DType dtype, int head_dim, AttentionMode mode, bool causal,
                                          const KernelOverrides& overrides = {});

// The decode kernel's in-line merge of a lone item of 3-8 rows (decode_merge.cuh,
// merge_rows_in_line): at most this many (row, other column) pairs for the kernel's R rows
// (4 for items of 3-4 rows, 8 for 5-8), whose lse the lanes hold and whose o loads are in
// flight at once. Wider groups take the ticket path.
inline constexpr int kInLinePairs = 16;

class PagedAttentionRunner {
 public:
  // The plan options must be plan_options_for_device's with the same overrides.
  PagedAttentionRunner(DType dtype, int head_dim, int q_heads, int kv_heads, const PlanCapacity& capacity,
                       const KernelOverrides& overrides = {});
  ~PagedAttentionRunner();
  PagedAttentionRunner(const PagedAttentionRunner&) = delete;
  PagedAttentionRunner& operator=(const PagedAttentionRunner&) = delete;

  // Copies the plan into the device buffers: prepare(plan), then upload_prepared(stream).
  void upload(const plan::AttentionPlan& plan, void* stream = nullptr);
  // The host half of an upload: checks the plan against the capacity (throws when over it;
  // the current plan stays intact), chooses its kernels (choose_launch) and packs its arrays
  // into pinned staging laid out as the one device block that holds them. No device work, so
  // it may run while a step that reads the current plan is in flight (the engine prepares the
  // next step's plan during this one). A second prepare replaces the first.
  void prepare(const plan::AttentionPlan& plan);
  // The device half: the prepared plan becomes the current one, moved into the device block by
  // one copy. Synchronous without a stream; with one (a cudaStream_t) asynchronous on it, so a
  // run() on the same stream sees it. Throws when nothing is prepared.
  void upload_prepared(void* stream = nullptr);
  bool has_prepared() const;
  // Enqueues the step on `stream` (a cudaStream_t; nullptr = the legacy stream).
  // shared_only: the shared-segment kernel alone (benchmarks time it by itself).
  void run(const PagedAttentionArgs& args, void* stream = nullptr, bool shared_only = false) const;
  // The kernels run() launches for the last uploaded plan.
  const LaunchChoice& launch_choice() const;
  // launch_choice().key(): a CUDA graph captured under one choice replays that choice.
  int launch_variant() const;
  // Fills the partial-state buffers with NaN (tests: every read entry must be written).
  void poison_states();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hydragen::cuda
