#include "cpu_ceilings.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>

#include "core/thread_pool.h"

namespace hydragen::bench {

namespace {

using Clock = std::chrono::steady_clock;

double best_seconds(int runs, const std::function<void()>& body) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    body();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

double sgemm_flops_per_s(int n) {
  std::vector<float> a(static_cast<std::size_t>(n) * n), b(a.size()), c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 17) * 0.01f;
    b[i] = static_cast<float>(i % 13) * 0.02f;
  }
  auto run = [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                n, 0.0f, c.data(), n);
  };
  run();  // warm-up: OpenBLAS starts its threads
  return 2.0 * n * n * n / best_seconds(5, run);
}

// Chunks of a buffer spread over the thread pool, the way attention reads K/V.
constexpr std::int64_t kChunks = 64;

double read_bytes_per_s(std::size_t bytes) {
  std::vector<std::uint64_t> data(bytes / sizeof(std::uint64_t), 1);
  std::vector<std::uint64_t> sums(kChunks);
  const std::size_t chunk = data.size() / kChunks;
  auto run = [&] {
    ThreadPool::global().parallel_for(kChunks, [&](std::int64_t i) {
      const std::uint64_t* p = data.data() + i * chunk;
      std::uint64_t acc[8] = {};
      for (std::size_t j = 0; j < chunk; j += 8) {
        for (int k = 0; k < 8; ++k) acc[k] ^= p[j + k];
      }
      sums[i] = acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
    });
  };
  run();
  return static_cast<double>(chunk * kChunks * sizeof(std::uint64_t)) / best_seconds(5, run);
}

// memcpy rate counting bytes read + written.
double copy_bytes_per_s(std::size_t bytes) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  const std::size_t chunk = bytes / kChunks;
  auto run = [&] {
    ThreadPool::global().parallel_for(kChunks, [&](std::int64_t i) {
      std::memcpy(dst.data() + i * chunk, src.data() + i * chunk, chunk);
    });
  };
  run();
  return 2.0 * static_cast<double>(chunk * kChunks) / best_seconds(5, run);
}

}  // namespace

std::string cpu_model_name() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const std::size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

double physical_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

Ceilings measure_cpu_ceilings() {
  constexpr int kGemmN = 2048;
  constexpr std::size_t kStreamBytes = std::size_t{512} << 20;
  Ceilings c;
  c.device = cpu_model_name() + ", " + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) + " cores";
  c.peak_flops_per_s = sgemm_flops_per_s(kGemmN);
  c.peak_flops_source = "cblas_sgemm " + std::to_string(kGemmN) + "^3 fp32, best of 5";
  c.bandwidth_bytes_per_s = read_bytes_per_s(kStreamBytes);
  c.bandwidth_source = "multi-threaded read of 512 MiB, best of 5";
  c.extra["copy_bytes_per_s"] = copy_bytes_per_s(kStreamBytes / 2);
  c.extra["copy_source"] = "multi-threaded memcpy of 256 MiB, bytes read + written";
  c.extra["threads"] = ThreadPool::global().workers();
  c.extra["blas_threads"] = openblas_get_num_threads();
  c.extra["physical_memory_bytes"] = physical_memory_bytes();
  return c;
}

CacheFlusher::CacheFlusher(std::size_t bytes) : buffer_(bytes / sizeof(std::uint64_t), 0) {}

void CacheFlusher::flush() {
  for (std::size_t i = 0; i < buffer_.size(); i += 8) buffer_[i] += 1;
  std::uint64_t acc = 0;
  for (std::size_t i = 0; i < buffer_.size(); i += 8) acc += buffer_[i];
  sink_ += acc;
}

}  // namespace hydragen::bench
