// Which kernels run one attention step on CUDA: one value, LaunchChoice, chosen by one function,
// choose_launch, from the plan's summary, the device's kernels and the overrides (the pattern of
// llama.cpp's flash-attention kernel selector). Also the plan options that fit the device's
// kernels. Host only, no CUDA types: compiled in every build, so CI tests every rule
// (tests/test_launch_choice.cpp). The measurements behind each rule are in docs/perf-notes.md
// under the headings named here.
#pragma once

#include <cstdint>
#include <optional>

#include "hydragen/attention.h"
#include "plan/paged_plan.h"

namespace hydragen::cuda {

// The shared launch's kernels: mma.sync (shared_mma.cuh: every build and head dim), wgmma
// (shared_attention.cuh: sm_90a, d 128, two blocks per SM) and the warp-specialized TMA kernel
// (shared_attention_ws.cuh: sm_90a, d 128, one block per SM).
enum class SharedKernel { mma, wgmma, warp_specialized };
// The suffix launch's kernels: decode (decode_attention.cuh: a warp per item) and quad
// (decode_quad.cuh: four lanes per lone one-row item).
enum class SuffixKernel { decode, quad };
// The decode kernel's builds, by the rows their one path serves: general (1-8 rows, every
// path), narrow (one-row items), four (3-4 rows), eight (5-8 rows).
enum class DecodeBuild { general = 0, narrow = 1, four = 4, eight = 8 };
// A switch that a rule decides unless forced on or off.
enum class Force { by_rule, on, off };

// The shared kernels' lazy rescaling (online_softmax_step): a row's running max moves only
// once a score passes it by more than this many log2 units, so the unnormalized
// probabilities stay <= 2^lag (fp16's P holds 2^15). 0 moves it on every increase.
inline constexpr float kRescaleLag = 8.f, kMaxRescaleLag = 12.f;
// Suffix items per decode block (DecodeShape::kWarps): the suffix slots count them.
inline constexpr int kDecodeItemsPerBlock = 4;

// Kernel choices forced for A/B timing and tests. The environment is read once, where a runner
// is built for the engine or the bench (kernel_overrides_from_environment); tests set the
// fields directly.
struct KernelOverrides {
  // HYDRAGEN_SHARED_KERNEL=mma|wgmma|ws: that shared kernel for every plan, plans split for its
  // blocks per SM (unset or auto: by rule).
  std::optional<SharedKernel> shared;
  // HYDRAGEN_PDL=1|0: programmatic dependent launches everywhere / nowhere (unset: pdl_rule).
  Force pdl = Force::by_rule;
  // Tests only: the paths a rule does not take on small shapes. Each forced kernel or build
  // is taken where the plan's items fit it, else the rule decides.
  std::optional<SuffixKernel> suffix;
  std::optional<DecodeBuild> decode_build;
  Force merge_launch = Force::by_rule;  // on: wherever a suffix is split
  float rescale_lag = kRescaleLag;      // 0..kMaxRescaleLag
};

// KernelOverrides from the values of HYDRAGEN_SHARED_KERNEL and HYDRAGEN_PDL (nullptr or
// empty: unset); a value outside the documented ones is an error naming its variable.
KernelOverrides parse_kernel_overrides(const char* shared_kernel, const char* pdl);
// The same from the environment: the only place the CUDA backend reads it.
KernelOverrides kernel_overrides_from_environment();

// What this device and build can run, from the runner's kernel tables: resident blocks per SM
// of each kernel, 0 where the build has no code for this device or head dim.
struct DeviceKernels {
  int sms = 0;
  bool pdl = false;  // sm_90 and later: programmatic dependent launches
  int mma_blocks_per_sm = 0, wgmma_blocks_per_sm = 0, ws_blocks_per_sm = 0;
  int decode_blocks_per_sm = 0;  // the decode kernel's general build
  int blocks_per_sm(SharedKernel kernel) const;
};

// What the choice reads from a plan, gathered in one pass over its suffix items (the choice is
// made on every step, on the step's critical path: a 13B batch of 1024 has ~41K items).
struct PlanSummary {
  std::int64_t shared_items = 0;
  bool shared_full_tiles = false;  // AttentionPlan::shared_full_tiles
  std::int64_t suffix_items = 0, suffix_pieces = 0, suffix_keys = 0, groups = 0;
  int max_rows = 0, min_rows = 0;  // per suffix item (0 without items)
  bool one_row = true;             // every suffix item has one row
  bool lone_rows = true;           // ... and is its merge group's only item
  std::int64_t split_rows = 0;     // AttentionPlan::merge_rows: rows of split merge groups
  bool split_multi_row = false;    // some split group has two rows or more
  int max_columns = 0;             // AttentionPlan::max_columns
  static PlanSummary of(const plan::AttentionPlan& plan);
};

// The kernels one step launches, and how.
struct LaunchChoice {
  SharedKernel shared = SharedKernel::mma;
  SuffixKernel suffix = SuffixKernel::decode;
  DecodeBuild decode_build = DecodeBuild::general;  // (suffix == decode)
  bool merge_launch = false;         // split_merge_kernel follows the decode kernel
  bool suffix_after_shared = false;  // the suffix launch is the shared launch's programmatic dependent
  bool merge_after_decode = false;   // ... the merge launch the decode launch's
  // The warp-specialized shared kernel may start under the launch that writes q
  // (PagedAttentionArgs::q_from_previous_launch).
  bool shared_after_previous = false;
  // Distinct for distinct choices: a CUDA graph captured under one replays that one.
  int key() const;
  bool operator==(const LaunchChoice&) const = default;
};

// The shared kernel the device runs by default, or the forced one (which must exist).
SharedKernel device_shared_kernel(const DeviceKernels& device, const KernelOverrides& overrides);
// The one selector. Rules, each under its perf-notes heading:
// - shared: the device's kernel; the warp-specialized one for full-tile plans ("v13").
// - suffix: quad for lone one-row items of few keys ("v14-suffix", quad_rule); else decode.
// - decode build: decode_build_rule ("v30", "v32").
// - merge launch: merge_launch_rule ("v39b").
// - suffix after shared: pdl_rule ("v23c"); merge after decode wherever the device has PDL.
LaunchChoice choose_launch(const PlanSummary& plan, const DeviceKernels& device, const KernelOverrides& overrides);

// The rules, exposed for their tests.
// Lone one-row items with at most kQuadShortMeanKeys keys on average, or at most
// kQuadMaxMeanKeys where there are at least kQuadManyItems items.
inline constexpr std::int64_t kQuadShortMeanKeys = 2, kQuadMaxMeanKeys = 32, kQuadManyItems = 8192;
bool quad_rule(const PlanSummary& plan);
// Narrow where every item has one row and the items are few (<= kNarrowMostItems) or short
// (<= 2 pieces each); else the one-path build the rows fit, else general.
inline constexpr std::int64_t kNarrowMostItems = 8192;
DecodeBuild decode_build_rule(const PlanSummary& plan);
// Where a split group has two rows or more and, under a shared launch, the widest group has at
// least kMergeLaunchMinColumnsStacked columns.
inline constexpr int kMergeLaunchMinColumnsStacked = 8;
bool merge_launch_rule(const PlanSummary& plan);
// Where the shared launch's `shared_items` (at `blocks_per_sm`) keep at most half of the SMs busy.
bool pdl_rule(std::int64_t shared_items, int blocks_per_sm, int sms);

// Plan options for the device's kernels: their slots (split-KV fills whole waves of them), the
// full-tile kernel's slots and head splits, one-row suffix items by rule.
plan::PlanOptions plan_options_for(const DeviceKernels& device, AttentionMode mode, bool causal,
                                   const KernelOverrides& overrides);

}  // namespace hydragen::cuda
