// What the CPU can do at best, measured in the same run as a benchmark: a large sgemm
// (compute ceiling) and a multi-threaded streaming read (memory ceiling). Also the cache
// flush that benchmarks run between timed runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_report.h"

namespace hydragen::bench {

// sgemm GFLOP/s (best of a few n×n×n products), read and copy bandwidth of large buffers.
Ceilings measure_cpu_ceilings();

std::string cpu_model_name();
double physical_memory_bytes();

// Evicts the caches by writing and reading a buffer larger than the last-level cache.
class CacheFlusher {
 public:
  explicit CacheFlusher(std::size_t bytes = std::size_t{128} << 20);
  void flush();

 private:
  std::vector<std::uint64_t> buffer_;
  std::uint64_t sink_ = 0;
};

}  // namespace hydragen::bench
