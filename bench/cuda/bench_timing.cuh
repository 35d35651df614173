// How the benchmark times device work, shared by cuda_bench.cu (`hydragen bench attention`) and
// the development probes in bench/probes/ (compiled with -I. -Iinclude -Isrc), so that a probe's
// numbers are timed exactly as a bench point is: time_step (CUDA events around the step, 256 MB
// written before each run to flush L2, the launches queued behind a device-side wait, median of
// `repeats` after `warmup` runs), and the plain streaming read that gives a memory-bound point
// its floor. It defines kernels: include it from one translation unit of a binary.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "bench/cuda/cuda_bench.h"
#include "backend/cuda/cuda_check.h"

namespace hydragen::cuda {

// Reads n 16-byte words once (kLoads in flight per thread); the xor keeps the loads.
template <int kLoads>
__global__ void read_words(const uint4* __restrict__ p, std::int64_t n, unsigned* sink) {
  unsigned x = 0;
  const std::int64_t stride = std::int64_t{gridDim.x} * blockDim.x;
  std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x;
  for (; i + (kLoads - 1) * stride < n; i += kLoads * stride) {
    uint4 v[kLoads];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) v[j] = __ldcs(p + i + j * stride);
#pragma unroll
    for (int j = 0; j < kLoads; ++j) x ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  for (; i < n; i += stride) {
    const uint4 v = __ldcs(p + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9e3779b9u) *sink = x;  // (a data-dependent store the compiler cannot drop)
}

// Keeps the device busy for `ns` nanoseconds (one thread), so that what the host enqueues next
// is queued before the device reaches it.
__global__ void hold_device(std::uint64_t ns) {
  std::uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while (t - t0 < ns);
}

struct DeviceBuffer {
  void* p = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { HG_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 16))); }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

inline constexpr std::size_t kFlushBytes = 256u << 20;
inline constexpr float kWarmupMs = 10.f;  // device time the warm-up keeps the device busy (time_step)

// The buffer time_step writes to flush L2: one for every step type (a static inside the
// template made one 256 MB buffer per lambda timed).
inline DeviceBuffer& flush_buffer() {
  static DeviceBuffer flush(kFlushBytes);
  return flush;
}

// HYDRAGEN_BENCH_IDLE_START=1: time_step records `start` on an idle device (see below).
inline bool idle_start() {
  static const bool idle = std::getenv("HYDRAGEN_BENCH_IDLE_START") != nullptr;
  return idle;
}

// Median/min/max of `repeats` timings of `step`, each after an L2 flush. Before each timing the
// device waits 200 us (hold_device) while the host records `start` and enqueues the step, so the
// start event is not taken on an idle device that then waits for the host's launches (2-6 us
// per point on an H200, a third of the smallest points; before session 17 every point carried
// it). HYDRAGEN_BENCH_IDLE_START=1 times the old way (for comparisons).
template <class Step>
AttentionBenchTiming time_step(Step&& step, int warmup, int repeats) {
  DeviceBuffer& flush = flush_buffer();
  cudaEvent_t start, stop;
  HG_CUDA_CHECK(cudaEventCreate(&start));
  HG_CUDA_CHECK(cudaEventCreate(&stop));
  // Warm-up: `warmup` steps, and more until they have kept the device busy for kWarmupMs. With
  // three warm-up steps alone a full sweep timed 40/40 B=1 32K+256 (one plan in both modes)
  // 1.116x slower in the first mode timed at the point, most of its 20 runs slow; with this
  // warm-up, 1.00 (perf-notes session 21, "The bench's mode-order artifact").
  for (int i = 0; i < warmup; ++i) step();
  for (int steps = 1, rounds = 0; warmup > 0 && rounds < 16; steps *= 2, ++rounds) {
    HG_CUDA_CHECK(cudaEventRecord(start));
    for (int i = 0; i < steps; ++i) step();
    HG_CUDA_CHECK(cudaEventRecord(stop));
    HG_CUDA_CHECK(cudaEventSynchronize(stop));
    float busy = 0;
    HG_CUDA_CHECK(cudaEventElapsedTime(&busy, start, stop));
    if (busy * 2 >= kWarmupMs) break;  // this round and the next would pass kWarmupMs
  }
  std::vector<double> ms;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    // HYDRAGEN_BENCH_NO_FLUSH=1 keeps L2 warm (to separate flush effects in perf notes).
    static const bool flush_l2 = std::getenv("HYDRAGEN_BENCH_NO_FLUSH") == nullptr;
    if (flush_l2) HG_CUDA_CHECK(cudaMemsetAsync(flush.p, i & 0xff, kFlushBytes));
    HG_CUDA_CHECK(cudaStreamSynchronize(nullptr));
    if (!idle_start()) {
      hold_device<<<1, 1>>>(200'000);
      HG_CUDA_CHECK(cudaGetLastError());
    }
    HG_CUDA_CHECK(cudaEventRecord(start));
    step();
    HG_CUDA_CHECK(cudaEventRecord(stop));
    HG_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    HG_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  AttentionBenchTiming timing;
  timing.samples = static_cast<int>(ms.size());
  timing.median_ms = ms[ms.size() / 2];
  timing.min_ms = ms.front();
  timing.max_ms = ms.back();
  return timing;
}

}  // namespace hydragen::cuda
