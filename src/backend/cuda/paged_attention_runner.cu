// Plan buffers and the two launches of a paged attention step. See paged_attention_runner.h.
#include "backend/cuda/paged_attention_runner.h"

#include <cudaTypedefs.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/decode_quad.cuh"
#include "backend/cuda/paged_attention.cuh"
#include "backend/cuda/shared_attention.cuh"
#include "backend/cuda/shared_attention_ws.cuh"

namespace hydragen::cuda {

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

namespace {

using LaunchFn = void (*)(const PagedAttentionParams&, int grid, cudaStream_t);
// The suffix launch's kernels: after_shared launches it as a programmatic dependent of the
// shared launch just before it on the stream (PDL, paged_attention.cuh's wait_for_shared_launch).
using SuffixLaunchFn = void (*)(const PagedAttentionParams&, int grid, cudaStream_t, bool after_shared);

// The mma.sync kernel: as the suffix launch (launch_mma) or the shared one (launch).
template <class T, int D, int WM, int WN>
void launch_mma(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool after_shared) {
  using Tile = PagedTile<T, D, WM, WN>;
  launch_kernel(paged_attention_kernel<T, D, WM, WN>, grid, Tile::kThreads, Tile::kSmemBytes, stream, after_shared, p);
}
template <class T, int D, int WM, int WN>
void launch(const PagedAttentionParams& p, int grid, cudaStream_t stream) {
  launch_mma<T, D, WM, WN>(p, grid, stream, false);
}

// Raises the kernel's shared-memory limit once; returns resident blocks per SM.
template <class T, int D, int WM, int WN>
int prepare() {
  using Tile = PagedTile<T, D, WM, WN>;
  auto kernel = paged_attention_kernel<T, D, WM, WN>;
  HG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
  int blocks = 0;
  HG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Tile::kThreads, Tile::kSmemBytes));
  HG_CHECK(blocks > 0, "paged attention: the kernel does not fit on this device (", Tile::kSmemBytes,
           " bytes of shared memory)");
  return blocks;
}

// The suffix launch's decode kernel (one warp per item, non-persistent grid); Rows: its build
// (decode_attention_kernel: 0 general, else the R = Rows path alone).
template <class T, int D, int MinBlocks, int Rows>
void launch_decode(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool after_shared) {
  using Shape = DecodeShape<T, D>;
  launch_kernel(decode_attention_kernel<T, D, MinBlocks, Rows>, grid, Shape::kThreads,
                Shape::smem_bytes(Shape::layout_rows(Rows)), stream, after_shared, p);
}
template <class T, int D, int MinBlocks, int Rows>
int prepare_decode() {
  using Shape = DecodeShape<T, D>;
  auto kernel = decode_attention_kernel<T, D, MinBlocks, Rows>;
  constexpr int bytes = Shape::smem_bytes(Shape::layout_rows(Rows));
  HG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  int blocks = 0;
  HG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Shape::kThreads, bytes));
  HG_CHECK(blocks > 0, "paged attention: the decode kernel does not fit on this device");
  return blocks;
}
constexpr int kDecodeItemsPerBlock = 4;  // DecodeShape::kWarps

// The merge launch after the decode kernel (split_merge_kernel, decode_merge.cuh): a persistent
// grid of warps over the plan's merge rows; dependent: the decode launch's programmatic dependent.
template <class T, int D>
void launch_split_merge(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool dependent) {
  launch_kernel(split_merge_kernel<T, D>, grid, 32 * kSplitMergeWarps, 0, stream, dependent, p);
}

template <class T, int D, int KB>
void launch_decode_quad(const PagedAttentionParams& p, int grid, cudaStream_t stream, bool after_shared) {
  launch_kernel(decode_quad_kernel<T, D, KB>, grid, QuadShape<T, D, KB>::kThreads, 0, stream, after_shared, p);
}

}  // namespace

// Which kernel runs the suffix launch: the decode kernel (one warp per item) for every plan
// since v18 put its items of 3..8 rows on the tensor cores. Before v18 the mma kernel took
// items of 3..8 rows that were long per item (> 32 pieces on average) or per merge group
// (> 128 pieces per row group); measured against that rule on the H200 (session 9, the
// 160-point GQA sweep with HYDRAGEN_SUFFIX_KERNEL=decode, docs/perf-notes.md), the decode
// kernel took 0.42-0.87x the time at every point the rule gave the mma kernel (8/1 B=64 16K
// paged 0.379 -> 0.158 ms, 32/8 B=1024 16K paged 13.2 -> 11.2 ms) and 0.93-1.10x elsewhere
// (the same kernel: run-to-run spread of points under 0.1 ms). Both kernels are correct for
// every plan; HYDRAGEN_SUFFIX_KERNEL=mma|decode forces one (the tests run the mma kernel so).
bool suffix_runs_decode_kernel() {
  const char* env = std::getenv("HYDRAGEN_SUFFIX_KERNEL");
  return env == nullptr || std::string(env) != "mma";
}

SuffixItemSummary SuffixItemSummary::of(const plan::AttentionPlan& plan) {
  SuffixItemSummary s;
  s.items = static_cast<std::int64_t>(plan.suffix_items.size());
  s.groups = static_cast<std::int64_t>(plan.groups.size());
  for (const plan::PlanItem& it : plan.suffix_items) {
    s.pieces += it.piece_count;
    for (int i = 0; i < it.piece_count; ++i) s.keys += plan.pieces[static_cast<std::size_t>(it.piece_begin + i)].tokens;
    s.max_rows = std::max(s.max_rows, it.row_count);
    s.min_rows = s.min_rows == 0 ? it.row_count : std::min(s.min_rows, it.row_count);
    s.one_row &= it.row_count == 1;
    s.lone_rows &= it.row_count == 1 && plan.groups[static_cast<std::size_t>(it.group)].items == 1;
  }
  s.split_rows = static_cast<std::int64_t>(plan.merge_rows.size());
  for (const plan::PlanMergeRow& mr : plan.merge_rows) s.split_multi_row |= mr.row > 0;
  s.stacked = !plan.shared_items.empty();
  s.max_columns = plan.max_columns;
  return s;
}

// HYDRAGEN_MERGE_LAUNCH=0 keeps the split groups' merge in the decode kernel (the last
// arrival's, for A/B timing and the tests), =1 takes the merge launch for every split plan;
// unset: the rule (paged_attention_runner.h).
bool merge_launch_rule(const SuffixItemSummary& suffix) {
  const char* env = std::getenv("HYDRAGEN_MERGE_LAUNCH");
  const std::string force = env != nullptr ? env : "";
  HG_CHECK(force.empty() || force == "0" || force == "1", "HYDRAGEN_MERGE_LAUNCH=", force, ": expected 0 or 1 (or unset)");
  if (suffix.split_rows == 0 || force == "0") return false;
  return force == "1" || (suffix.split_multi_row && (!suffix.stacked || suffix.max_columns >= kMergeLaunchMinColumnsStacked));
}

// Narrow when every item has one row and the launch is either short items (one-key
// hydragen suffixes: 40/40 B=1024 2K 0.347 -> 0.304 ms) or few items (B=64 MHA paged
// 1K/2K/16K 3.2-3.5 -> 3.6-3.9 TB/s); at B=1024 with long items the wide kernel streamed
// faster (paged 1K 4.78 vs 4.27, dense 3.27 vs 2.75 TB/s). docs/perf-notes.md. Calibrated
// when the narrow kernel ran 20 warps per SM and the wide 12; since v9-suffix (K/V staged in
// shared memory) they run 12 and 8, and the rule has not been re-measured.
bool decode_runs_narrow(const SuffixItemSummary& suffix) {
  return suffix.one_row && (std::getenv("HYDRAGEN_DECODE_NARROW") != nullptr ||
                            ((suffix.items <= 8192 || suffix.pieces <= 2 * suffix.items) &&
                             std::getenv("HYDRAGEN_DECODE_WIDE") == nullptr));
}

int decode_build_rows(const SuffixItemSummary& suffix) {
  if (decode_runs_narrow(suffix)) return 1;
  if (std::getenv("HYDRAGEN_DECODE_GENERAL") != nullptr) return 0;
  // (min_rows is 0 without items)
  if (suffix.min_rows >= 3 && suffix.max_rows <= 4) return 4;
  if (suffix.min_rows >= 5 && suffix.max_rows <= 8) return 8;
  return 0;
}

namespace {

struct KernelPair {
  LaunchFn shared;
  SuffixLaunchFn suffix;
  int shared_blocks_per_sm, suffix_blocks_per_sm;
  SuffixLaunchFn decode = nullptr;  // the suffix launch when set: the general build
  int decode_blocks_per_sm = 0;
  SuffixLaunchFn decode_narrow = nullptr;  // the decode kernel for one-row items only (3 blocks per SM)
  SuffixLaunchFn decode_four = nullptr;    // ... for items of 3-4 rows only (the R = 4 path alone)
  SuffixLaunchFn decode_eight = nullptr;   // ... for items of 5-8 rows only (the R = 8 path alone)
  // decode_quad.cuh (four lanes per item) for plans whose suffix items are lone one-row items
  // with few keys (quad_decode_keys): four keys in flight, or one.
  SuffixLaunchFn decode_quad4 = nullptr, decode_quad1 = nullptr;
  SuffixLaunchFn split_merge = nullptr;  // the merge launch after the decode kernel (merge_launch_rule)
  bool shared_wgmma = false;  // the shared launch is shared_attention.cuh's kernel
  // The warp-specialized TMA kernel (shared_attention_ws.cuh, ws-pp-tma), run in place of
  // `shared` for plans split for its slots (AttentionPlan::shared_full_tiles). H200 A/B with it
  // on every plan (docs/perf-notes.md v13): its shared launch took 0.66-0.94x v5's time where
  // the 128-row tiles were full (8/1 from B=16, 32/8 from B=64, MHA B=1024; 40/40 B=1024 16K
  // 0.86 -> 0.60 ms) and 0.82-1.06x where they held 64 rows (32/8 B=16, 40/40 B=64: one
  // consumer warpgroup of two computes on empty rows), whose whole steps ran up to 1.14x
  // slower (32/8 B=16 32K). Run over plans split for v5's two blocks per SM it lost to v5 at
  // 8/1 B=64 32K (0.113 vs 0.099 ms; 0.071 with its own splits): each block then runs two
  // items in series.
  LaunchFn shared_ws = nullptr;
  int shared_ws_blocks_per_sm = 0;
  bool shared_ws_always = false;  // HYDRAGEN_SHARED_KERNEL=auto-ws: every plan (A/B timing)
};

// The shared launch: the wgmma kernel of shared_attention.cuh where the build has sm_90a code
// for this device and head_dim is 128, else the mma.sync template of paged_attention.cuh
// (HYDRAGEN_SHARED_KERNEL, see paged_attention_runner.h).
// The values HYDRAGEN_SHARED_KERNEL takes, for the error that refuses any other.
constexpr const char* kSharedKernelNames = "auto, auto-ws, mma, wgmma, ws-tma, ws-pp-tma";

template <class T, int D>
void use_wgmma_shared(KernelPair& k, int shared_tile_rows) {
  if constexpr (D == 128) {
    const char* env = std::getenv("HYDRAGEN_SHARED_KERNEL");
    if (env != nullptr && std::string(env) == "mma") return;
    const std::string name = env != nullptr ? env : "";
    // The warp-specialized kernels (shared_attention_ws.cuh, 128-row tiles) forced for every
    // plan, with plans split for their one block per SM (A/B timing, tests).
    if (name.starts_with("ws") && shared_tile_rows == 128) {
      // ws-tma (consumers issue freely), ws-pp-tma (they take turns): shared_attention_ws.cuh.
      struct Variant {
        const char* name;
        LaunchFn launch;
        int (*prepare)();
      };
      const Variant variants[] = {{"ws-tma", launch_shared_ws<T, false>, prepare_shared_ws<T, false>},
                                  {"ws-pp-tma", launch_shared_ws<T, true>, prepare_shared_ws<T, true>}};
      for (const Variant& v : variants) {
        if (name != v.name) continue;
        const int blocks = v.prepare();
        HG_CHECK(blocks > 0, "HYDRAGEN_SHARED_KERNEL=", name, ": this build or device has no sm_90a code for it");
        k.shared = v.launch, k.shared_blocks_per_sm = blocks, k.shared_wgmma = true;
        return;
      }
      fail("HYDRAGEN_SHARED_KERNEL=", name, ": unknown kernel (", kSharedKernelNames, ")");
    }
    const int blocks = shared_tile_rows == 128 ? prepare_shared_wgmma<T, 2>() : prepare_shared_wgmma<T, 1>();
    HG_CHECK(blocks > 0 || env == nullptr || std::string(env) != "wgmma",
             "HYDRAGEN_SHARED_KERNEL=wgmma: this build or device has no sm_90a code for it");
    if (blocks == 0) return;
    k.shared = shared_tile_rows == 128 ? launch_shared_wgmma<T, 2> : launch_shared_wgmma<T, 1>;
    k.shared_blocks_per_sm = blocks;
    k.shared_wgmma = true;
    // The default (unset, or auto / auto-ws): the TMA kernel too, for the plans it wins.
    HG_CHECK(name.empty() || name == "wgmma" || name == "auto" || name == "auto-ws", "HYDRAGEN_SHARED_KERNEL=", name,
             ": unknown kernel (", kSharedKernelNames, ")");
    if (name == "wgmma" || shared_tile_rows != 128) return;
    const int ws_blocks = prepare_shared_ws<T, true>();
    if (ws_blocks == 0) return;
    k.shared_ws = launch_shared_ws<T, true>;
    k.shared_ws_blocks_per_sm = ws_blocks;
    k.shared_ws_always = name == "auto-ws";
  }
}

template <class T, int D>
KernelPair kernels_for(int shared_tile_rows) {
  KernelPair k = shared_tile_rows == 128 ? KernelPair{launch<T, D, 8, 1>, launch_mma<T, D, 1, 4>,
                                                      prepare<T, D, 8, 1>(), prepare<T, D, 1, 4>()}
                                         : KernelPair{launch<T, D, 4, 1>, launch_mma<T, D, 1, 4>,
                                                      prepare<T, D, 4, 1>(), prepare<T, D, 1, 4>()};
  use_wgmma_shared<T, D>(k, shared_tile_rows);
  k.decode = launch_decode<T, D, 2, 0>, k.decode_blocks_per_sm = prepare_decode<T, D, 2, 0>();
  k.decode_narrow = launch_decode<T, D, 3, 1>;
  prepare_decode<T, D, 3, 1>();
  k.decode_four = launch_decode<T, D, 2, 4>;
  k.decode_eight = launch_decode<T, D, 2, 8>;
  // The suffix slots (plan options) are counted from the general build's occupancy; the
  // one-path builds fit at least as many blocks (fewer registers, the same shared memory).
  auto check_fits = [&](int rows, int blocks) {
    HG_CHECK(blocks >= k.decode_blocks_per_sm, "paged attention: the decode kernel's ", rows, "-row build fits ", blocks,
             " blocks per SM, fewer than the general build's ", k.decode_blocks_per_sm);
  };
  check_fits(4, prepare_decode<T, D, 2, 4>());
  check_fits(8, prepare_decode<T, D, 2, 8>());
  k.decode_quad4 = launch_decode_quad<T, D, 4>;
  k.decode_quad1 = launch_decode_quad<T, D, 1>;
  k.split_merge = launch_split_merge<T, D>;
  return k;
}

KernelPair select_kernels(DType dtype, int head_dim, int shared_tile_rows) {
  HG_CHECK(shared_tile_rows == 64 || shared_tile_rows == 128, "paged attention: shared_tile_rows must be 64 or 128");
  HG_CHECK(dtype == DType::bf16 || dtype == DType::f16, "paged attention: dtype must be bf16 or f16, got ",
           dtype_name(dtype));
  HG_CHECK(supported_head_dim(head_dim), "paged attention: head_dim ", head_dim,
           " is not supported on CUDA (supported: 64, 128)");
  const int r = shared_tile_rows;
  if (dtype == DType::bf16) return head_dim == 64 ? kernels_for<__nv_bfloat16, 64>(r) : kernels_for<__nv_bfloat16, 128>(r);
  return head_dim == 64 ? kernels_for<__half, 64>(r) : kernels_for<__half, 128>(r);
}

template <class E>
E* device_array(std::int64_t count) {
  void* p = nullptr;
  HG_CUDA_CHECK(cudaMalloc(&p, std::max<std::int64_t>(count, 1) * sizeof(E)));
  return static_cast<E*>(p);
}

int multiprocessors() {
  int device = 0, sms = 0;
  HG_CUDA_CHECK(cudaGetDevice(&device));
  HG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace

bool suffix_items_are_lone_rows(const plan::AttentionPlan& plan) { return SuffixItemSummary::of(plan).lone_rows; }

// H200, 40/40 (MHA) hydragen, prefix 2K, the quad kernel's builds forced against the warp
// kernel (docs/perf-notes.md v14-suffix; whole attention step, ms):
//   B=1024 (40960 items): suffix 1: warp 0.278, quad 0.162, quad1 0.165; 12: 0.297 / 0.218 /
//     0.220; 32: 0.353 / 0.324 / 0.321; 64 (earlier run, quad): 1.01x warp.
//   B=256 (10240 items): suffix 1: 0.094 / 0.069 / 0.065; 8: 0.095 / 0.082 / 0.075; 32:
//     0.119 / 0.130 / 0.114.
//   B=64 (2560 items): suffix 1: 0.048 / 0.045 / 0.044; 8: 0.047 / 0.049 / 0.052; 32: 0.057 /
//     0.073 / 0.086 (8 items per warp: too few warps for longer items); the paged baseline's
//     long items lost 1.1-3.6x.
// So the one-key build (it matched or beat the four-key one at every point where either won):
// for one- and two-key items at any batch, and up to 32 keys per item on average where the
// launch has at least 8192 items. HYDRAGEN_DECODE_KERNEL=warp|quad|quad1 forces (quad and
// quad1 where the items are lone rows).
int quad_decode_keys(const SuffixItemSummary& suffix) {
  const char* env = std::getenv("HYDRAGEN_DECODE_KERNEL");
  const std::string force = env != nullptr ? env : "auto";
  HG_CHECK(force == "auto" || force == "warp" || force == "quad" || force == "quad1", "HYDRAGEN_DECODE_KERNEL=", force,
           ": unknown kernel (auto, warp, quad, quad1)");
  if (force == "warp" || suffix.items == 0 || !suffix.lone_rows) return 0;
  if (force == "quad") return 4;
  if (force == "quad1") return 1;
  const bool served = suffix.keys <= kQuadShortMeanKeys * suffix.items ||
                      (suffix.items >= kQuadManyItems && suffix.keys <= kQuadMaxMeanKeys * suffix.items);
  return served ? 1 : 0;
}

int quad_decode_keys(const plan::AttentionPlan& plan) { return quad_decode_keys(SuffixItemSummary::of(plan)); }

// The suffix launch as the shared launch's programmatic dependent (PDL) where the shared items
// keep at most half of the SMs busy: the decode kernel's blocks then start on the idle SMs and
// stream their keys beside the shared launch, waiting for it only before they read its states
// (decode_attention.cuh). With the SMs full they gain nothing, and the early blocks crowd the
// few SMs free at the start (H200, HYDRAGEN_PDL=1 everywhere: 32/8 B=32 16K s1 1.17x, 32K s1
// 1.33x; docs/perf-notes.md v23c).
bool pdl_rule(std::int64_t shared_items, int blocks_per_sm, int sms) {
  if (shared_items == 0 || blocks_per_sm <= 0) return false;
  const std::int64_t busy = (shared_items + blocks_per_sm - 1) / blocks_per_sm;
  return 2 * busy <= sms;
}

// HYDRAGEN_PDL: unset or empty -1 (the rule decides), "1" 1, "0" 0, else an error naming the
// variable.
int parse_pdl_force(const char* env) {
  if (env == nullptr || *env == '\0') return -1;
  const std::string v = env;
  HG_CHECK(v == "0" || v == "1", "HYDRAGEN_PDL=", v, ": expected 0 or 1 (or unset)");
  return v == "1" ? 1 : 0;
}

// HYDRAGEN_RESCALE_LAG: a plain number in [0, kMaxRescaleLag] (the whole text), else an error
// naming the variable.
float parse_rescale_lag(const std::string& text) {
  char* end = nullptr;
  const float lag = std::strtof(text.c_str(), &end);
  HG_CHECK(end != text.c_str() && *end == '\0' && lag >= 0.f && lag <= kMaxRescaleLag, "HYDRAGEN_RESCALE_LAG=", text,
           ": expected a number from 0 to ", kMaxRescaleLag);
  return lag;
}

bool supported_head_dim(int head_dim) { return head_dim == 64 || head_dim == 128; }

plan::PlanOptions plan_options_for_device(DType dtype, int head_dim, AttentionMode mode, bool causal) {
  plan::PlanOptions options;
  options.mode = mode;
  options.causal = causal;
  if (const char* env = std::getenv("HYDRAGEN_SHARED_TILE_ROWS")) options.shared_tile_rows = std::atoi(env);
  const KernelPair k = select_kernels(dtype, head_dim, options.shared_tile_rows);
  // The wgmma kernel's plans split shared work past one wave too (MHA B=1024 16K shared
  // kernel 1.13 -> 0.87 ms, docs/perf-notes.md v5); HYDRAGEN_SHARED_WAVES=0/1 overrides.
  const char* waves = std::getenv("HYDRAGEN_SHARED_WAVES");
  options.shared_split_past_one_wave = waves != nullptr ? std::atoi(waves) != 0 : k.shared_wgmma;
  const int sms = multiprocessors();
  options.shared_slots = sms * k.shared_blocks_per_sm;
  options.shared_full_tile_slots = k.shared_ws != nullptr ? sms * k.shared_ws_blocks_per_sm : 0;
  options.suffix_slots = k.decode ? sms * k.decode_blocks_per_sm * kDecodeItemsPerBlock : sms * k.suffix_blocks_per_sm;
  // The decode kernel's suffix items: one row each where plan::one_row_suffix_items holds (e8).
  if (k.decode) options.suffix_tile_rows = plan::kSuffixTileRowsByRule;
  // A/B of the suffix split's floor (PlanOptions::suffix_min_split_tokens; docs/perf-notes.md e7)
  // and of the rows per suffix item (PlanOptions::suffix_tile_rows, 0 = by rule; e8).
  if (const char* env = std::getenv("HYDRAGEN_SUFFIX_MIN_SPLIT")) {
    options.suffix_min_split_tokens = std::atoll(env);
    HG_CHECK(options.suffix_min_split_tokens >= 1, "HYDRAGEN_SUFFIX_MIN_SPLIT=", env, ": must be a positive token count");
  }
  // The suffix split rule (PlanOptions::suffix_split_by_cost): HYDRAGEN_SUFFIX_SPLIT_RULE=fill
  // for the rule before session 19 (A/B).
  if (const char* env = std::getenv("HYDRAGEN_SUFFIX_SPLIT_RULE")) {
    const std::string rule = env;
    HG_CHECK(rule == "fill" || rule == "cost", "HYDRAGEN_SUFFIX_SPLIT_RULE=", rule, ": must be fill or cost");
    options.suffix_split_by_cost = rule == "cost";
  }
  if (const char* env = std::getenv("HYDRAGEN_SUFFIX_COLUMN_COST")) {
    char* end = nullptr;
    options.suffix_column_cost = std::strtod(env, &end);
    HG_CHECK(end != env && *end == '\0' && options.suffix_column_cost >= 0, "HYDRAGEN_SUFFIX_COLUMN_COST=", env,
             ": must be a number >= 0 (keys per row per split)");
  }
  // Splits by kv head for the full-tile kernel's rounds (PlanOptions::shared_head_splits;
  // docs/perf-notes.md v19); HYDRAGEN_SHARED_HEAD_SPLITS=0 turns them off.
  const char* head_splits = std::getenv("HYDRAGEN_SHARED_HEAD_SPLITS");
  options.shared_head_splits = options.shared_full_tile_slots > 0 && (head_splits == nullptr || std::atoi(head_splits) != 0);
  // A/B of the fold estimated at the rule's rows (PlanOptions::fold_at_rule_rows; e9).
  if (const char* env = std::getenv("HYDRAGEN_FOLD_AT_RULE_ROWS")) options.fold_at_rule_rows = std::atoi(env) != 0;
  if (const char* env = std::getenv("HYDRAGEN_SUFFIX_TILE_ROWS")) {
    options.suffix_tile_rows = std::atoi(env);
    HG_CHECK(options.suffix_tile_rows >= plan::kSuffixTileRowsByRule && options.suffix_tile_rows <= plan::kSuffixTileRows,
             "HYDRAGEN_SUFFIX_TILE_ROWS=", env, ": must be 1..", plan::kSuffixTileRows, " (0: by rule)");
  }
  return options;
}

PlanCapacity PlanCapacity::of(const plan::AttentionPlan& plan) {
  return {static_cast<std::int64_t>(plan.pages.size()), static_cast<std::int64_t>(plan.pieces.size()),
          static_cast<std::int64_t>(plan.rows.size()), static_cast<std::int64_t>(plan.shared_items.size()),
          static_cast<std::int64_t>(plan.suffix_items.size()), static_cast<std::int64_t>(plan.groups.size()),
          plan.state_entries, static_cast<std::int64_t>(plan.merge_rows.size())};
}

bool PlanCapacity::holds(const PlanCapacity& need) const {
  return need.pages <= pages && need.pieces <= pieces && need.rows <= rows && need.shared_items <= shared_items &&
         need.suffix_items <= suffix_items && need.groups <= groups && need.state_entries <= state_entries &&
         need.merge_rows <= merge_rows;
}

PlanCapacity PlanCapacity::max(const PlanCapacity& o) const {
  return {std::max(pages, o.pages), std::max(pieces, o.pieces), std::max(rows, o.rows),
          std::max(shared_items, o.shared_items), std::max(suffix_items, o.suffix_items),
          std::max(groups, o.groups), std::max(state_entries, o.state_entries), std::max(merge_rows, o.merge_rows)};
}

// Where each plan array starts in the plan block (16-byte aligned, at capacity), in the order
// prepare packs them: the counts first, the arrays that grow with the batch last.
struct PlanBlockLayout {
  std::size_t counts = 0, pages = 0, pieces = 0, rows = 0, shared_items = 0, groups = 0, merge_rows = 0,
              suffix_items = 0, bytes = 0;
  static PlanBlockLayout of(const PlanCapacity& c) {
    PlanBlockLayout l;
    std::size_t at = 0;
    auto take = [&at](std::int64_t n, std::size_t size) {
      const std::size_t begin = at;
      at += (static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * size + 15) / 16 * 16;
      return begin;
    };
    l.counts = take(3, sizeof(std::int32_t));
    l.pages = take(c.pages, sizeof(std::int32_t));
    l.pieces = take(c.pieces, sizeof(plan::PlanPiece));
    l.rows = take(c.rows, sizeof(plan::PlanRow));
    l.shared_items = take(c.shared_items, sizeof(plan::PlanItem));
    l.groups = take(c.groups, sizeof(plan::PlanMergeGroup));
    l.merge_rows = take(c.merge_rows, sizeof(plan::PlanMergeRow));
    // Whole blocks of the suffix grids: the decode kernel loads an item before checking its
    // index against the count (load_suffix_item).
    static_assert(kSuffixItemsAlign % kDecodeItemsPerBlock == 0 && kSuffixItemsAlign % kQuadItemsPerBlock == 0);
    l.suffix_items = take((c.suffix_items + kSuffixItemsAlign - 1) / kSuffixItemsAlign * kSuffixItemsAlign,
                          sizeof(plan::PlanItem));
    l.bytes = at;
    return l;
  }
};

struct PagedAttentionRunner::Impl {
  DType dtype;
  int head_dim, q_heads, kv_heads;
  PlanCapacity capacity;
  KernelPair kernels;
  int shared_grid = 0, shared_ws_grid = 0, suffix_grid = 0, decode_grid = 0, merge_grid = 0;
  // The current plan's kernel choices (made by prepare, applied by upload_prepared).
  struct Choices {
    bool shared_ws = false;      // AttentionPlan::shared_full_tiles
    bool suffix_decode = true;   // suffix_runs_decode_kernel
    int decode_rows = 0;         // decode_build_rows: 1 narrow, 4 four-row, 8 eight-row, 0 general build
    int decode_quad = 0;         // quad_decode_keys
    bool after_shared = false;   // pdl_rule: the suffix launch is the shared launch's dependent
    bool merge_launch = false;   // merge_launch_rule, on the decode kernel (not its quad builds)
  } choices;
  int decode_quad_grid = 0;
  bool pdl_capable = false;    // sm_90+
  int pdl_force = -1;          // HYDRAGEN_PDL: 1 always, 0 never, unset: by pdl_rule
  float rescale_lag = kRescaleLag;  // HYDRAGEN_RESCALE_LAG
  int sms = 0;
  // The plan's arrays, at capacity, in one device block laid out as each pinned staging
  // buffer is: prepare packs a plan into one, upload_prepared moves it with one copy. Two
  // buffers, used in turn, so a plan can be packed while the last one's copy is in flight.
  unsigned char* plan_block = nullptr;
  PlanBlockLayout layout;  // of plan_block (and of each staging buffer)
  struct Staging {
    unsigned char* host = nullptr;
    cudaEvent_t copied = nullptr;  // after its last copy (the buffer may be packed again)
    std::size_t bytes = 0;         // the copy's extent: up to the end of the last array
    Choices choices;
  } staging[2];
  int next_staging = 0;  // the buffer prepare packs next
  int prepared = -1;     // the buffer holding a prepared plan not yet uploaded, or -1
  std::int32_t* pages = nullptr;
  plan::PlanPiece* pieces = nullptr;
  plan::PlanRow* rows = nullptr;
  plan::PlanItem* shared_items = nullptr;
  plan::PlanItem* suffix_items = nullptr;
  plan::PlanMergeGroup* groups = nullptr;
  plan::PlanMergeRow* merge_rows = nullptr;
  std::int32_t* counts = nullptr;  // [shared items, suffix items, merge rows]
  std::int32_t* arrivals = nullptr;
  float* state_o = nullptr;
  float* state_lse = nullptr;
};

PagedAttentionRunner::PagedAttentionRunner(DType dtype, int head_dim, int q_heads, int kv_heads,
                                           const PlanCapacity& capacity, int shared_tile_rows)
    : impl_(std::make_unique<Impl>()) {
  HG_CHECK(kv_heads > 0 && q_heads % kv_heads == 0, "PagedAttentionRunner: q_heads (", q_heads,
           ") must be a multiple of kv_heads (", kv_heads, ")");
  Impl& m = *impl_;
  m.dtype = dtype, m.head_dim = head_dim, m.q_heads = q_heads, m.kv_heads = kv_heads, m.capacity = capacity;
  m.kernels = select_kernels(dtype, head_dim, shared_tile_rows);
  const int sms = multiprocessors();
  // Persistent grids: the item count is read on the device, so the launch shape is fixed.
  m.shared_grid = static_cast<int>(std::min<std::int64_t>(capacity.shared_items, sms * m.kernels.shared_blocks_per_sm));
  m.shared_ws_grid = static_cast<int>(std::min<std::int64_t>(capacity.shared_items, sms * m.kernels.shared_ws_blocks_per_sm));
  m.suffix_grid = static_cast<int>(std::min<std::int64_t>(capacity.suffix_items, sms * m.kernels.suffix_blocks_per_sm));
  // decode: one warp per item, blocks past the item count exit at once
  m.decode_grid = static_cast<int>((capacity.suffix_items + kDecodeItemsPerBlock - 1) / kDecodeItemsPerBlock);
  m.merge_grid = static_cast<int>(std::min<std::int64_t>((capacity.merge_rows + kSplitMergeWarps - 1) / kSplitMergeWarps,
                                                         std::int64_t{sms} * kSplitMergeBlocksPerSm));
  m.decode_quad_grid = static_cast<int>((capacity.suffix_items + kQuadItemsPerBlock - 1) / kQuadItemsPerBlock);
  m.layout = PlanBlockLayout::of(capacity);
  const PlanBlockLayout& layout = m.layout;
  m.plan_block = device_array<unsigned char>(static_cast<std::int64_t>(layout.bytes));
  for (Impl::Staging& buffer : m.staging) {
    HG_CUDA_CHECK(cudaMallocHost(&buffer.host, layout.bytes));
    HG_CUDA_CHECK(cudaEventCreateWithFlags(&buffer.copied, cudaEventDisableTiming));
  }
  m.counts = reinterpret_cast<std::int32_t*>(m.plan_block + layout.counts);
  m.pages = reinterpret_cast<std::int32_t*>(m.plan_block + layout.pages);
  m.pieces = reinterpret_cast<plan::PlanPiece*>(m.plan_block + layout.pieces);
  m.rows = reinterpret_cast<plan::PlanRow*>(m.plan_block + layout.rows);
  m.shared_items = reinterpret_cast<plan::PlanItem*>(m.plan_block + layout.shared_items);
  m.groups = reinterpret_cast<plan::PlanMergeGroup*>(m.plan_block + layout.groups);
  m.merge_rows = reinterpret_cast<plan::PlanMergeRow*>(m.plan_block + layout.merge_rows);
  m.suffix_items = reinterpret_cast<plan::PlanItem*>(m.plan_block + layout.suffix_items);
  m.arrivals = device_array<std::int32_t>(capacity.groups);
  m.state_o = device_array<float>(capacity.state_entries * head_dim);
  m.state_lse = device_array<float>(capacity.state_entries);
  HG_CUDA_CHECK(cudaMemset(m.counts, 0, 3 * sizeof(std::int32_t)));
  {
    int device = 0, major = 0;
    HG_CUDA_CHECK(cudaGetDevice(&device));
    HG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    m.pdl_capable = major >= 9;
    m.sms = sms;
    m.pdl_force = parse_pdl_force(std::getenv("HYDRAGEN_PDL"));
  }
  if (const char* env = std::getenv("HYDRAGEN_RESCALE_LAG")) m.rescale_lag = parse_rescale_lag(env);
  HG_CUDA_CHECK(cudaMemset(m.arrivals, 0, std::max<std::int64_t>(capacity.groups, 1) * sizeof(std::int32_t)));
}

PagedAttentionRunner::~PagedAttentionRunner() {
  Impl& m = *impl_;
  for (void* p : {static_cast<void*>(m.plan_block), static_cast<void*>(m.arrivals), static_cast<void*>(m.state_o),
                  static_cast<void*>(m.state_lse)})
    cudaFree(p);
  for (Impl::Staging& buffer : m.staging) {
    if (buffer.copied != nullptr) cudaEventSynchronize(buffer.copied), cudaEventDestroy(buffer.copied);
    if (buffer.host != nullptr) cudaFreeHost(buffer.host);
  }
}

void PagedAttentionRunner::prepare(const plan::AttentionPlan& plan) {
  Impl& m = *impl_;
  // Every capacity first: a plan that does not fit leaves the last one intact.
  auto fits = [](std::size_t n, std::int64_t capacity, const char* what) {
    HG_CHECK(static_cast<std::int64_t>(n) <= capacity, "PagedAttentionRunner::upload: plan has ", n, " ", what,
             ", capacity is ", capacity);
  };
  fits(plan.pages.size(), m.capacity.pages, "pages");
  fits(plan.pieces.size(), m.capacity.pieces, "pieces");
  fits(plan.rows.size(), m.capacity.rows, "rows");
  fits(plan.shared_items.size(), m.capacity.shared_items, "shared items");
  fits(plan.suffix_items.size(), m.capacity.suffix_items, "suffix items");
  fits(plan.groups.size(), m.capacity.groups, "merge groups");
  fits(plan.merge_rows.size(), m.capacity.merge_rows, "merge rows");
  HG_CHECK(plan.state_entries <= m.capacity.state_entries, "PagedAttentionRunner::upload: plan needs ",
           plan.state_entries, " partial states, capacity is ", m.capacity.state_entries);
  // The staging buffer to pack, once its last copy has read it.
  Impl::Staging& buffer = m.staging[m.next_staging];
  HG_CUDA_CHECK(cudaEventSynchronize(buffer.copied));
  const SuffixItemSummary suffix = SuffixItemSummary::of(plan);  // one pass for the decode kernel's two choices
  Impl::Choices& c = buffer.choices;
  c.suffix_decode = suffix_runs_decode_kernel();
  c.shared_ws = m.kernels.shared_ws != nullptr && (m.kernels.shared_ws_always || plan.shared_full_tiles);
  c.decode_rows = decode_build_rows(suffix);
  c.decode_quad = c.suffix_decode ? quad_decode_keys(suffix) : 0;
  c.merge_launch = c.suffix_decode && c.decode_quad == 0 && merge_launch_rule(suffix);
  const int blocks_per_sm = c.shared_ws ? m.kernels.shared_ws_blocks_per_sm : m.kernels.shared_blocks_per_sm;
  c.after_shared = m.pdl_capable &&
                   (m.pdl_force == 1 || (m.pdl_force < 0 && pdl_rule(static_cast<std::int64_t>(plan.shared_items.size()),
                                                                     blocks_per_sm, m.sms)));
  const std::int32_t counts[3] = {static_cast<std::int32_t>(plan.shared_items.size()),
                                  static_cast<std::int32_t>(plan.suffix_items.size()),
                                  static_cast<std::int32_t>(plan.merge_rows.size())};
  // The arrays at their places in the plan block; the copy takes the block up to the end of
  // the last array (the unused capacity between arrays goes along: nothing reads past the
  // counts).
  const PlanBlockLayout& layout = m.layout;
  std::size_t end = 0;
  auto put = [&](std::size_t offset, const auto& src) {
    const std::size_t bytes = src.size() * sizeof(src[0]);
    if (bytes > 0) std::memcpy(buffer.host + offset, src.data(), bytes);
    end = std::max(end, offset + bytes);
  };
  put(layout.counts, std::span<const std::int32_t>(counts));
  put(layout.pages, plan.pages);
  put(layout.pieces, plan.pieces);
  put(layout.rows, plan.rows);
  put(layout.shared_items, plan.shared_items);
  put(layout.groups, plan.groups);
  put(layout.merge_rows, plan.merge_rows);
  put(layout.suffix_items, plan.suffix_items);
  buffer.bytes = end;
  m.prepared = m.next_staging;
  m.next_staging ^= 1;
}

void PagedAttentionRunner::upload_prepared(void* stream) {
  Impl& m = *impl_;
  HG_CHECK(m.prepared >= 0, "PagedAttentionRunner::upload_prepared: no plan prepared since the last upload");
  Impl::Staging& buffer = m.staging[m.prepared];
  m.prepared = -1;
  m.choices = buffer.choices;
  auto st = static_cast<cudaStream_t>(stream);
  if (stream == nullptr) {
    HG_CUDA_CHECK(cudaMemcpy(m.plan_block, buffer.host, buffer.bytes, cudaMemcpyHostToDevice));
  } else {
    HG_CUDA_CHECK(cudaMemcpyAsync(m.plan_block, buffer.host, buffer.bytes, cudaMemcpyHostToDevice, st));
    HG_CUDA_CHECK(cudaEventRecord(buffer.copied, st));
  }
}

bool PagedAttentionRunner::has_prepared() const { return impl_->prepared >= 0; }

void PagedAttentionRunner::upload(const plan::AttentionPlan& plan, void* stream) {
  prepare(plan);
  upload_prepared(stream);
}

int PagedAttentionRunner::launch_variant() const {
  const Impl::Choices& c = impl_->choices;
  return (c.suffix_decode ? 1 : 0) | (c.decode_rows == 1 ? 2 : 0) | (c.shared_ws ? 4 : 0) | (c.decode_quad != 0 ? 8 : 0) |
         (c.decode_quad == 1 ? 16 : 0) | (c.after_shared ? 32 : 0) | (c.decode_rows == 4 ? 64 : 0) |
         (c.decode_rows == 8 ? 128 : 0) | (c.merge_launch ? 256 : 0);
}

void PagedAttentionRunner::poison_states() {
  Impl& m = *impl_;
  HG_CUDA_CHECK(cudaMemset(m.state_o, 0xff, std::max<std::int64_t>(m.capacity.state_entries, 1) * m.head_dim * 4));
  HG_CUDA_CHECK(cudaMemset(m.state_lse, 0xff, std::max<std::int64_t>(m.capacity.state_entries, 1) * 4));
}

void PagedAttentionRunner::run(const PagedAttentionArgs& args, void* stream, bool shared_only) const {
  const Impl& m = *impl_;
  auto st = static_cast<cudaStream_t>(stream);
  PagedAttentionParams p{};
  p.q = args.q, p.k_pool = args.k_pool, p.v_pool = args.v_pool;
  p.pages = m.pages, p.pieces = m.pieces, p.rows = m.rows, p.groups = m.groups, p.merge_rows = m.merge_rows;
  p.merge_row_count = m.counts + 2;
  p.group_arrivals = m.arrivals;
  p.states = {m.state_o, m.state_lse};
  p.out = args.out, p.out_lse = args.out_lse;
  HG_CHECK(args.page_size > 0 && (args.page_size & (args.page_size - 1)) == 0,
           "PagedAttentionRunner::run: page_size must be a power of two, got ", args.page_size);
  p.page_shift = __builtin_ctz(static_cast<unsigned>(args.page_size));
  p.page_size = args.page_size, p.kv_heads = m.kv_heads, p.q_heads = m.q_heads;
  const float scale = args.scale > 0 ? args.scale : 1.f / std::sqrt(static_cast<float>(m.head_dim));
  p.scale_log2 = scale * 1.4426950408889634f;
  p.rescale_lag = m.rescale_lag;
  if (m.shared_grid > 0) {
    p.items = m.shared_items, p.item_count = m.counts;
    // v28: the TMA shared kernel as the q-writing launch's dependent (sm_90; HYDRAGEN_PDL=0 off).
    p.q_after_wait = args.q_from_previous_launch && m.choices.shared_ws && m.pdl_capable && m.pdl_force != 0;
    if (m.choices.shared_ws) m.kernels.shared_ws(p, m.shared_ws_grid, st);
    else m.kernels.shared(p, m.shared_grid, st);
    HG_CUDA_CHECK(cudaGetLastError());
  }
  if (shared_only || m.suffix_grid == 0) return;
  p.items = m.suffix_items, p.item_count = m.counts + 1;
  const bool pdl = m.choices.after_shared && m.shared_grid > 0;
  if (m.choices.decode_quad != 0)
    (m.choices.decode_quad == 1 ? m.kernels.decode_quad1 : m.kernels.decode_quad4)(p, m.decode_quad_grid, st, pdl);
  else if (m.choices.suffix_decode) {
    p.merge_launch = m.choices.merge_launch;
    (m.choices.decode_rows == 1   ? m.kernels.decode_narrow
     : m.choices.decode_rows == 4 ? m.kernels.decode_four
     : m.choices.decode_rows == 8 ? m.kernels.decode_eight
                                  : m.kernels.decode)(p, m.decode_grid, st, pdl);
    HG_CUDA_CHECK(cudaGetLastError());
    if (m.choices.merge_launch) m.kernels.split_merge(p, m.merge_grid, st, m.pdl_capable && m.pdl_force != 0);
  } else {
    m.kernels.suffix(p, m.suffix_grid, st, pdl);
  }
  HG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace hydragen::cuda
