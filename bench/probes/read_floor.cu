// The fastest one-launch read of N bytes on this GPU, timed the way `hydragen bench attention`
// times a point (CUDA events, 256 MB written before each run, the launch queued behind a
// device-side wait, median of 30 after 3 warm-ups). It answers: what can any kernel that reads
// N bytes once reach at the sizes of the small paged/dense points (34-135 MB), launch and
// ramp included? Each configuration streams the buffer with 16-byte loads, `kLoads` in flight
// per thread, over `blocks` x 256 threads; the best configuration per size is reported.
// The read and the timer are the bench's own (bench/cuda/bench_timing.cuh): `hydragen
// bench attention` measures each point's floor with the same read (loads 4, 4-16 blocks per SM).
// Build and run on a GPU machine:
//   nvcc -O2 -std=c++20 -I. -Iinclude -Isrc -gencode arch=compute_90a,code=sm_90a \
//        bench/probes/read_floor.cu -o read_floor && ./read_floor
// `./read_floor MB [BLOCKS_PER_SM LOADS]` times one size (and one configuration): the run to put
// under Nsight Compute beside a kernel reading as many bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <vector>

#include "bench/cuda/bench_timing.cuh"

using namespace hydragen::cuda;

int main(int argc, char** argv) try {
  int sms = 0;
  HG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const std::size_t max_bytes = std::size_t{1080} << 20;
  DeviceBuffer buf(max_bytes), sink(4);
  HG_CUDA_CHECK(cudaMemset(buf.p, 1, max_bytes));
  std::printf("%8s %10s %12s %10s %8s\n", "MB", "best us", "TB/s", "blocks", "loads");
  std::vector<double> sizes = {34.0, 67.0, 135.0, 270.0, 540.0, 1080.0};
  std::vector<int> per_sms = {2, 4, 8, 16}, loads_list = {4, 8};
  if (argc > 1) sizes = {std::atof(argv[1])};
  if (argc > 3) per_sms = {std::atoi(argv[2])}, loads_list = {std::atoi(argv[3])};
  for (double mb : sizes) {
    if (!(mb > 0 && mb <= 1080)) throw std::runtime_error("MB must be in (0, 1080]");
    const std::int64_t n = static_cast<std::int64_t>(mb * 1e6) / 16;
    const auto* words = static_cast<const uint4*>(buf.p);
    auto* out = static_cast<unsigned*>(sink.p);
    double best = 1e30;
    int best_blocks = 0, best_loads = 0;
    for (int per_sm : per_sms) {
      for (int loads : loads_list) {
        if (per_sm < 1 || (loads != 4 && loads != 8)) throw std::runtime_error("BLOCKS_PER_SM >= 1, LOADS 4 or 8");
        const int blocks = sms * per_sm;
        const double median = time_step(
                                  [&] {
                                    if (loads == 4) read_words<4><<<blocks, 256>>>(words, n, out);
                                    else read_words<8><<<blocks, 256>>>(words, n, out);
                                  },
                                  3, 30)
                                  .median_ms;
        if (median < best) best = median, best_blocks = blocks, best_loads = loads;
      }
    }
    std::printf("%8.0f %10.1f %12.2f %10d %8d\n", mb, best * 1e3, mb * 1e6 / (best * 1e-3) / 1e12, best_blocks, best_loads);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "read_floor: %s\n", e.what());
  return 1;
}
