// The fastest one-launch read of N bytes on this GPU, timed the way `hydragen bench attention`
// times a point (CUDA events, 256 MB written before each run, the launch queued behind a
// device-side wait, median of 30 after 3 warm-ups). It answers: what can any kernel that reads
// N bytes once reach at the sizes of the small paged/dense points (34-135 MB), launch and
// ramp included? Each configuration streams the buffer with 16-byte loads, `kLoads` in flight
// per thread, over `blocks` x 256 threads; the best configuration per size is reported.
// Build and run on a GPU machine:
//   nvcc -O2 -std=c++17 -Isrc -gencode arch=compute_90a,code=sm_90a bench/probes/read_floor.cu \
//        -o read_floor && ./read_floor
// (bench kernels from src/backend/cuda/bench_kernels.cuh: `hydragen bench attention` measures
// each point's floor with the same read)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "backend/cuda/bench_kernels.cuh"

using hydragen::cuda::hold_device;
using hydragen::cuda::read_words;

#define CHECK(x)                                                                  \
  do {                                                                            \
    cudaError_t e = (x);                                                          \
    if (e != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const std::size_t max_bytes = std::size_t{1080} << 20, flush_bytes = std::size_t{256} << 20;
  void *buf, *flush;
  unsigned* sink;
  CHECK(cudaMalloc(&buf, max_bytes));
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&sink, 4));
  CHECK(cudaMemset(buf, 1, max_bytes));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::printf("%8s %10s %12s %10s %8s\n", "MB", "best us", "TB/s", "blocks", "loads");
  for (double mb : {34.0, 67.0, 135.0, 270.0, 540.0, 1080.0}) {
    const std::int64_t n = static_cast<std::int64_t>(mb * 1e6) / 16;
    float best = 1e9f;
    int best_blocks = 0, best_loads = 0;
    for (int per_sm : {2, 4, 8, 16}) {
      for (int loads : {4, 8}) {
        const int blocks = sms * per_sm;
        auto launch = [&] {
          if (loads == 4) read_words<4><<<blocks, 256>>>(static_cast<const uint4*>(buf), n, sink);
          else read_words<8><<<blocks, 256>>>(static_cast<const uint4*>(buf), n, sink);
        };
        for (int w = 0; w < 3; ++w) launch();
        std::vector<float> ms;
        for (int r = 0; r < 30; ++r) {
          CHECK(cudaMemsetAsync(flush, r & 0xff, flush_bytes));
          CHECK(cudaDeviceSynchronize());
          hold_device<<<1, 1>>>(200000);
          CHECK(cudaEventRecord(a));
          launch();
          CHECK(cudaEventRecord(b));
          CHECK(cudaEventSynchronize(b));
          float t = 0;
          CHECK(cudaEventElapsedTime(&t, a, b));
          ms.push_back(t);
        }
        std::sort(ms.begin(), ms.end());
        const float med = ms[ms.size() / 2];
        if (med < best) best = med, best_blocks = blocks, best_loads = loads;
      }
    }
    std::printf("%8.0f %10.1f %12.2f %10d %8d\n", mb, best * 1e3, mb * 1e6 / (best * 1e-3) / 1e12, best_blocks, best_loads);
  }
  return 0;
}
