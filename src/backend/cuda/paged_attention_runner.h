// Host side of the paged attention step: device buffers of fixed capacity for the plan,
// `upload` (host -> device, between steps) and `run` (two launches, three with the merge launch;
// no allocation, no host synchronisation: capturable in a CUDA graph that keeps working after the
// next upload).
// No CUDA types here, so g++ code (tests, the tree_attention entry point) can use it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "plan/paged_plan.h"
#include "hydragen/dtype.h"

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
  // segment of the plan holds), and called griddepcontrol.launch_dependents: the TMA shared
  // kernel (sm_90) then starts as that launch's programmatic dependent, reads its items, pieces
  // and first K/V blocks while it runs, and waits for it only before reading q (v28,
  // docs/perf-notes.md). The engine's forward sets it after rope_append_kv.
  bool q_from_previous_launch = false;
};

// Head dims with compiled kernels; others throw from the runner's constructor.
bool supported_head_dim(int head_dim);

// Plan options for this device: its resident blocks per kernel (the split-KV rule fills
// whole waves of them) and the shared kernel's tile rows (HYDRAGEN_SHARED_TILE_ROWS = 64 or
// 128 overrides the default).
// The shared launch's kernel: for head_dim 128 when the build has sm_90a code for the device,
// per plan either shared_attention_ws.cuh's warp-specialized kernel with TMA copies (ws-pp-tma,
// docs/perf-notes.md v13) where most stacked work is in full 128-row tiles (the plan is then
// split for its one block per SM: PlanOptions::shared_full_tile_slots) or shared_attention.cuh's
// wgmma kernel (v5); else paged_attention.cuh (mma.sync).
// HYDRAGEN_SHARED_KERNEL overrides (A/B timing, tests): =mma the mma.sync kernel, =wgmma the
// wgmma kernel for every plan, =auto-ws the TMA kernel for every plan, =ws-pp-tma (the default's
// kernel) or ws-tma (its consumers do not take turns) that kernel for every plan with the plan's
// splits following its one block per SM (v10, v13; the cp.async-only variants ws, ws-pp, ws-hw
// and ws-pp-hw were deleted in session 17). With the wgmma kernels plans also split shared work
// that already fills a wave (PlanOptions::shared_split_past_one_wave); HYDRAGEN_SHARED_WAVES=0/1
// overrides that.
plan::PlanOptions plan_options_for_device(DType dtype, int head_dim, AttentionMode mode, bool causal);

// What the decode kernel's choices below (narrow build, quad build) read from a plan, gathered
// in one pass over its suffix items (upload makes the choices on every step, on the step's
// critical path: a 13B batch of 1024 has ~41K items). Host only.
struct SuffixItemSummary {
  std::int64_t items = 0, pieces = 0, keys = 0, groups = 0;
  int max_rows = 0, min_rows = 0;  // (0 without items)
  bool one_row = true;    // every item has one row
  bool lone_rows = true;  // ... and is its merge group's only item
  std::int64_t split_rows = 0;   // rows of merge groups of several suffix items (split suffixes):
                                 // AttentionPlan::merge_rows
  bool split_multi_row = false;  // some split group has two rows or more
  bool stacked = false;          // the plan has a shared launch
  int max_columns = 0;           // AttentionPlan::max_columns
  static SuffixItemSummary of(const plan::AttentionPlan& plan);
};

// Whether the suffix launch runs the decode kernel (else the mma.sync kernel): for every plan
// unless HYDRAGEN_SUFFIX_KERNEL=mma (the A/B numbers in paged_attention_runner.cu). Host only.
bool suffix_runs_decode_kernel();

// Whether the decode kernel's narrow build (one-row items only) serves the suffix launch.
// HYDRAGEN_DECODE_NARROW / HYDRAGEN_DECODE_WIDE force one (the narrow one only where every
// item has one row). Host only.
bool decode_runs_narrow(const SuffixItemSummary& suffix);

// The decode kernel build that serves the suffix launch: 1 (narrow, decode_runs_narrow), 4
// (every item has 3-4 rows: the build with the R = 4 path alone, perf-notes v30), 8 (every
// item has 5-8 rows: the R = 8 path alone, v32) or 0 (the general build: mixed plans, items of
// two rows, or any multi-row plan under HYDRAGEN_DECODE_GENERAL). Host only.
int decode_build_rows(const SuffixItemSummary& suffix);

// Whether the decode kernel is followed by the merge launch (split_merge_kernel), which merges
// the split merge groups (AttentionPlan::merge_rows) one warp per row (v39, docs/perf-notes.md)
// in place of each group's last arrival merging all of its rows on one warp: where a split
// group has two rows or more, and, under a shared launch, the plan's widest group has at least
// kMergeLaunchMinColumnsStacked columns. H200 A/B (every split plan against none, session 20):
// multi-row groups 0.70-0.96x (8/1 B=16-256, 32/8 B=16-64) except under a shared launch with 4
// columns (8/1 hydragen B=256 1K+256 1.08x, 32/8 B=64 1.02x; 10 columns: 0.81-0.95x);
// one-row groups (B=1, MHA, 8/1 hydragen B=16-64 with 256-key suffixes), whose last arrival
// merges one row as the launch does, 0.95-1.11x (the launch's start, 0.5-3 us, uncovered).
// HYDRAGEN_MERGE_LAUNCH=0 keeps the last arrival's merge, =1 takes the launch wherever a suffix
// is split (A/B, tests); any other value is an error naming it. Host only.
inline constexpr int kMergeLaunchMinColumnsStacked = 8;
bool merge_launch_rule(const SuffixItemSummary& suffix);

// Whether every suffix item of `plan` has one row and is its merge group's only item: the
// plans decode_quad.cuh's kernel can serve. Host only.
bool suffix_items_are_lone_rows(const plan::AttentionPlan& plan);

// Which build of decode_quad.cuh's kernel serves the suffix launch of `plan` when it runs the
// decode kernel: 0 none (one warp per item), 1 (one key in flight, 4 blocks per SM) or 4 (four
// keys in flight; forced only). The rule: lone one-row items with at most kQuadShortMeanKeys
// keys per item on average, or at most kQuadMaxMeanKeys where there are at least
// kQuadManyItems items, run the one-key build. Host only; numbers in paged_attention_runner.cu;
// HYDRAGEN_DECODE_KERNEL=warp|quad|quad1 forces.
inline constexpr std::int64_t kQuadShortMeanKeys = 2, kQuadMaxMeanKeys = 32, kQuadManyItems = 8192;
int quad_decode_keys(const SuffixItemSummary& suffix);
int quad_decode_keys(const plan::AttentionPlan& plan);
// Whether the suffix launch runs as the shared launch's programmatic dependent (PDL): when the
// shared launch's `shared_items` (at `blocks_per_sm` per SM) keep at most half of the `sms`
// SMs busy. HYDRAGEN_PDL=1 / 0 forces it on / off. Host only.
bool pdl_rule(std::int64_t shared_items, int blocks_per_sm, int sms);
// HYDRAGEN_PDL's value (nullptr when unset): 1 forces the programmatic dependent launches on, 0
// off, unset or empty leaves them to pdl_rule (-1); anything else is an error naming the
// variable. Host only.
int parse_pdl_force(const char* env);
// The decode kernel's in-line merge of a lone item of 3-8 rows (decode_merge.cuh,
// merge_rows_in_line): at most this many (row, other column) pairs for the kernel's R rows
// (4 for items of 3-4 rows, 8 for 5-8), whose lse the lanes hold and whose o loads are in
// flight at once (kInLinePairs / R other columns per row). Wider groups take the ticket path.
inline constexpr int kInLinePairs = 16;
// The shared kernels' lazy rescaling (online_softmax_step in shared_attention.cuh): a row's
// running max moves only once a score exceeds it by more than this many log2 units, so the
// unnormalized probabilities stay <= 2^lag (fp16's P holds up to 2^15). 0 moves it on every
// increase, as plain online softmax. HYDRAGEN_RESCALE_LAG overrides; parse_rescale_lag checks
// it (0..kMaxRescaleLag). Host only.
inline constexpr float kRescaleLag = 8.f, kMaxRescaleLag = 12.f;
float parse_rescale_lag(const std::string& text);

class PagedAttentionRunner {
 public:
  // shared_tile_rows must match the plan's (PlanOptions::shared_tile_rows).
  PagedAttentionRunner(DType dtype, int head_dim, int q_heads, int kv_heads, const PlanCapacity& capacity,
                       int shared_tile_rows = plan::kSharedTileRows);
  ~PagedAttentionRunner();
  PagedAttentionRunner(const PagedAttentionRunner&) = delete;
  PagedAttentionRunner& operator=(const PagedAttentionRunner&) = delete;

  // Copies the plan into the device buffers: prepare(plan), then upload_prepared(stream).
  void upload(const plan::AttentionPlan& plan, void* stream = nullptr);
  // The host half of an upload: checks the plan against the capacity (throws when over it;
  // the current plan stays intact), makes its kernel choices and packs its arrays into pinned
  // staging laid out as the one device block that holds them. No device work, so it may run
  // while a step that reads the current plan is in flight (the engine prepares the next
  // step's plan during this one; docs/perf-notes.md e13, e15). A second prepare replaces the
  // first.
  void prepare(const plan::AttentionPlan& plan);
  // The device half: the prepared plan becomes the current one, moved into the device block by
  // one copy. Synchronous without a stream; with one (a cudaStream_t) asynchronous on it, so a
  // run() on the same stream sees it. Throws when nothing is prepared.
  void upload_prepared(void* stream = nullptr);
  bool has_prepared() const;
  // Enqueues the step on `stream` (a cudaStream_t; nullptr = the legacy stream).
  // shared_only: the shared-segment kernel alone (benchmarks time it by itself).
  void run(const PagedAttentionArgs& args, void* stream = nullptr, bool shared_only = false) const;
  // Which kernels run() launches for the last uploaded plan (the suffix kernel and its width
  // are chosen per plan): a CUDA graph captured under one variant replays that variant.
  // Bits: 1 decode kernel (else mma), 2 its narrow build, 4 the TMA shared kernel, 8 a quad
  // decode build, 16 its one-key build, 32 the suffix launch a dependent of the shared one (PDL),
  // 64 the decode kernel's four-row build, 128 its eight-row build, 256 the merge launch after it.
  int launch_variant() const;
  // Fills the partial-state buffers with NaN (tests: every read entry must be written).
  void poison_states();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hydragen::cuda
