// The CUDA side of `hydragen bench attention`: device ceilings (copy and bf16 GEMM rates)
// and one timed attention point. Times with CUDA events around the step only, 256 MB
// written between runs to flush L2, median of `repeats` after `warmup` runs. The step's
// launches are queued behind a device-side wait, so the time is the device's alone: what a
// CUDA graph replays, without the host's time to encode and launch the kernels
// (bench_timing.cuh's time_step).
#include "bench/cuda/cuda_bench.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <utility>
#include <memory>
#include <vector>

#include "plan/paged_plan.h"
#include "bench/cuda/bench_timing.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/paged_attention_runner.h"

namespace hydragen::cuda {
namespace {

// Deterministic pseudo-random values in [-1, 1) (never zeros: zeros time differently).
__global__ void fill_random(std::uint16_t* p, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    const float x = (h & 0xffffff) / 8388608.f - 1.f;
    __nv_bfloat16 b = __float2bfloat16(x);  // bf16 bits; as fp16 bits also a finite value
    p[i] = *reinterpret_cast<std::uint16_t*>(&b);
  }
}

void fill(void* p, std::int64_t n, std::uint32_t seed) {
  fill_random<<<1024, 256>>>(static_cast<std::uint16_t*>(p), n, seed);
  HG_CUDA_CHECK(cudaGetLastError());
}

std::vector<std::int32_t> take_pages(std::int32_t& next, std::int64_t tokens, int page_size) {
  std::vector<std::int32_t> pages;
  for (std::int64_t t = 0; t < tokens; t += page_size) pages.push_back(next++);
  return pages;
}

// The plan options of a point: the device's, under the kernel overrides of the environment,
// and the suffix split model's two open numbers where set (A/B; see perf-notes: Suffix splits):
// HYDRAGEN_SUFFIX_MIN_SPLIT (keys, >= 1) and HYDRAGEN_SUFFIX_COLUMN_COST (keys per row per
// split, >= 0). The environment is read once.
plan::PlanOptions bench_plan_options(DType dtype, int head_dim, AttentionMode mode, const KernelOverrides& overrides) {
  static const std::pair<std::int64_t, double> ab = [] {
    std::pair<std::int64_t, double> read{-1, -1.0};
    if (const char* env = std::getenv("HYDRAGEN_SUFFIX_MIN_SPLIT")) {
      read.first = std::atoll(env);
      HG_CHECK(read.first >= 1, "HYDRAGEN_SUFFIX_MIN_SPLIT=", env, ": must be a positive token count");
    }
    if (const char* env = std::getenv("HYDRAGEN_SUFFIX_COLUMN_COST")) {
      char* end = nullptr;
      read.second = std::strtod(env, &end);
      HG_CHECK(end != env && *end == '\0' && read.second >= 0, "HYDRAGEN_SUFFIX_COLUMN_COST=", env,
               ": must be a number >= 0 (keys per row per split)");
    }
    return read;
  }();
  plan::PlanOptions options = plan_options_for_device(dtype, head_dim, mode, true, overrides);
  if (ab.first > 0) options.suffix_min_split_tokens = ab.first;
  if (ab.second >= 0) options.suffix_column_cost = ab.second;
  return options;
}

}  // namespace

bool cuda_available(std::string* why_not) {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess || n == 0) {
    if (why_not) *why_not = status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device found";
    cudaGetLastError();
    return false;
  }
  return true;
}

std::int64_t device_memory_bytes() {
  std::size_t free_bytes = 0, total_bytes = 0;
  HG_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<std::int64_t>(total_bytes);
}

DeviceCeilings measure_ceilings() {
  DeviceCeilings c;
  cudaDeviceProp prop{};
  HG_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  c.device_name = prop.name;
  {  // device-to-device copy, bytes read + written
    const std::size_t bytes = std::size_t{2} << 30;
    DeviceBuffer a(bytes), b(bytes);
    fill(a.p, bytes / 2, 1);
    const AttentionBenchTiming t = time_step([&] { HG_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice)); }, 3, 20);
    c.copy_tb_per_s = 2.0 * bytes / (t.median_ms * 1e-3) / 1e12;
  }
  {  // cuBLAS bf16 GEMM 8192^3, fp32 accumulation, random data
    const int n = 8192;
    DeviceBuffer a(std::size_t{2} * n * n), b(std::size_t{2} * n * n), d(std::size_t{2} * n * n);
    fill(a.p, std::int64_t{n} * n, 2);
    fill(b.p, std::int64_t{n} * n, 3);
    cublasHandle_t handle;
    HG_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS, "measure_ceilings: cublasCreate failed");
    const float alpha = 1, beta = 0;
    auto gemm = [&] {
      HG_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.p, CUDA_R_16BF, n, b.p, CUDA_R_16BF, n,
                            &beta, d.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
               "measure_ceilings: cublasGemmEx failed");
    };
    const AttentionBenchTiming t = time_step(gemm, 3, 20);
    c.gemm_tflops = 2.0 * n * n * double(n) / (t.median_ms * 1e-3) / 1e12;
    cublasDestroy(handle);
  }
  return c;
}

double bare_read_ms(double bytes) {
  static std::map<std::int64_t, double> measured;  // MB -> ms
  constexpr double kMostBytes = double(std::size_t{1} << 30);
  const double read_bytes = std::min(bytes, kMostBytes);
  const auto key = static_cast<std::int64_t>(std::llround(read_bytes / 1e6));
  auto found = measured.find(key);
  if (found == measured.end()) {
    int sms = 0;
    HG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const std::int64_t words = std::max<std::int64_t>(1, static_cast<std::int64_t>(read_bytes / 16));
    DeviceBuffer buffer(static_cast<std::size_t>(words) * 16), sink(4);
    HG_CUDA_CHECK(cudaMemset(buffer.p, 1, static_cast<std::size_t>(words) * 16));
    double best = 1e30;
    for (int blocks_per_sm : {4, 8, 16}) {
      const AttentionBenchTiming t = time_step(
          [&] {
            read_words<4><<<sms * blocks_per_sm, 256>>>(static_cast<const uint4*>(buffer.p), words,
                                                        static_cast<unsigned*>(sink.p));
            HG_CUDA_CHECK(cudaGetLastError());
          },
          3, 20);
      best = std::min(best, t.median_ms);
    }
    found = measured.emplace(key, best).first;
  }
  return found->second * bytes / read_bytes;
}

AttentionBenchTiming bench_attention(const AttentionBenchCase& bc) {
  const AttentionMode mode = parse_mode(bc.mode);
  HG_CHECK(bc.batch > 0 && bc.query_tokens > 0 && bc.heads % bc.kv_heads == 0, "bench_attention: bad case");
  HG_CHECK(bc.groups == 0 || bc.batch % bc.groups == 0, "bench_attention: batch must be a multiple of groups");
  const bool dense = mode == AttentionMode::dense;
  const bool two_level = bc.groups > 0;
  const std::int64_t level2 = two_level ? bc.level2 : 0;
  const std::int64_t context = bc.prefix + level2 + bc.suffix;
  const std::int64_t token_bytes = std::int64_t{bc.kv_heads} * bc.head_dim * 2;

  // Layout: root prefix -> (groups level-2 nodes) -> sequences; dense: one copy each.
  plan::PagedLayout layout;
  layout.page_size = bc.page_size, layout.kv_heads = bc.kv_heads, layout.q_heads = bc.heads;
  layout.head_dim = bc.head_dim;
  std::int32_t next_page = 0;
  const bool fold_level2 = bc.share_root_only;
  if (!dense) {
    layout.segments.push_back({kNoParent, bc.prefix, take_pages(next_page, bc.prefix, bc.page_size)});
    if (two_level && !fold_level2)
      for (int g = 0; g < bc.groups; ++g) layout.segments.push_back({0, level2, take_pages(next_page, level2, bc.page_size)});
  }
  const int per_group = two_level ? bc.batch / bc.groups : bc.batch;
  for (int b = 0; b < bc.batch; ++b) {
    const std::int64_t own = dense ? context : bc.suffix + (fold_level2 ? level2 : 0);
    const int parent = dense ? kNoParent : (two_level && !fold_level2 ? 1 + b / per_group : 0);
    layout.sequences.push_back({parent, own, take_pages(next_page, own, bc.page_size), bc.query_tokens});
  }
  AttentionBenchTiming timing;
  const std::int64_t pool_bytes = std::int64_t{next_page} * bc.page_size * token_bytes;
  // The K/V pools stay allocated for the next case that needs the same size: hydragen and paged
  // at one point hold one layout, so they read the same memory, filled once. (Kept pools alone
  // did not close the batch-1 gap between the two modes' identical plans; the untimed first case
  // in tools/bench_attention_cuda.cpp narrowed it: perf-notes session 21.)
  static std::int64_t kept_bytes = -1;
  static std::unique_ptr<DeviceBuffer> k_pool, v_pool;
  const bool reuse = kept_bytes == pool_bytes;
  if (!reuse) k_pool.reset(), v_pool.reset(), kept_bytes = -1;
  std::size_t free_bytes = 0, total_bytes = 0;
  HG_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const double held = reuse ? 2.0 * double(pool_bytes) : 0.0;  // the kept pools count as free
  if (2.0 * pool_bytes > 0.85 * (double(free_bytes) + held)) {
    timing.skipped = true;
    timing.skip_reason = concat("out of memory: ", bc.mode, " needs ", 2 * pool_bytes / 1000000000, " GB of K/V");
    return timing;
  }
  static const KernelOverrides overrides = kernel_overrides_from_environment();
  const plan::PlanOptions options = bench_plan_options(bc.dtype, bc.head_dim, mode, overrides);
  const plan::AttentionPlan plan = plan::build_attention_plan(layout, options);

  const std::int64_t rows = std::int64_t{bc.batch} * bc.query_tokens;
  const std::int64_t q_elems = rows * bc.heads * bc.head_dim;
  if (!reuse) {
    k_pool = std::make_unique<DeviceBuffer>(pool_bytes), v_pool = std::make_unique<DeviceBuffer>(pool_bytes);
    kept_bytes = pool_bytes;
    fill(k_pool->p, pool_bytes / 2, 11);
    fill(v_pool->p, pool_bytes / 2, 12);
  }
  DeviceBuffer q(q_elems * 2), out(q_elems * 2), lse(rows * bc.heads * 4);
  fill(q.p, q_elems, 13);
  PagedAttentionRunner runner(bc.dtype, bc.head_dim, bc.heads, bc.kv_heads, PlanCapacity::of(plan), overrides);
  runner.upload(plan);
  PagedAttentionArgs args;
  args.q = q.p, args.k_pool = k_pool->p, args.v_pool = v_pool->p, args.out = out.p;
  args.out_lse = static_cast<float*>(lse.p), args.page_size = bc.page_size;
  timing = time_step([&] { runner.run(args); }, bc.warmup, bc.repeats);
  if (mode == AttentionMode::hydragen && !plan.shared_items.empty())
    timing.shared_ms = time_step([&] { runner.run(args, nullptr, true); }, bc.warmup, bc.repeats).median_ms;

  timing.flops = 4.0 * rows * bc.heads * double(context) * bc.head_dim;
  // K/V each reader must read: stacked segments once, everything else once per sequence.
  double kv_tokens = 0;
  if (mode == AttentionMode::hydragen) {
    kv_tokens = double(bc.prefix) + double(bc.batch) * bc.suffix;
    kv_tokens += two_level ? (fold_level2 ? double(bc.batch) * level2 : double(bc.groups) * level2) : 0;
  } else {
    kv_tokens = double(bc.batch) * context;
  }
  timing.bytes = 2.0 * kv_tokens * token_bytes + 2.0 * q_elems * 2;
  return timing;
}

std::string bench_timer_description() {
  return idle_start() ? "CUDA events, L2 flushed between runs, start recorded on an idle device (host launch time counted)"
                      : "CUDA events, L2 flushed between runs, launches queued behind a device wait (device time only)";
}

}  // namespace hydragen::cuda
