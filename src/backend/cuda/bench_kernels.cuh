// Kernels of the benchmark's own measurements, shared by cuda_bench.cu and the development
// probes in bench/probes/ (compiled there with -Isrc): a plain streaming read (the floor of a
// memory-bound point of the same bytes) and a device-side wait (so that the host's launches
// are queued before the device reaches them). Kernels defined here: include it from one
// translation unit of a binary.
#pragma once

#include <cstdint>

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

}  // namespace hydragen::cuda
