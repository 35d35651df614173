// Host-only interface between the `hydragen bench` CLI (tools/) and its CUDA side. This header
// has no CUDA types so g++ can compile the CLI; the functions are defined in cuda_bench.cu,
// compiled into the CLI only when HYDRAGEN_WITH_CUDA is set.
#pragma once

#include <cstdint>
#include <string>

#include "hydragen/dtype.h"

namespace hydragen::cuda {

// The device's two ceilings, measured in the same run as the benchmark.
struct DeviceCeilings {
  std::string device_name;
  double copy_tb_per_s = 0;  // device-to-device copy, bytes read + written
  double gemm_tflops = 0;    // large bf16 GEMM through cuBLAS, random data
};

// One benchmark point. Shapes: B sequences, one shared prefix of `prefix` tokens, each
// sequence with a suffix of `suffix` tokens (its own K/V) and `query_tokens` queries.
// With groups > 0 the tree has two levels: root `prefix` -> `groups` nodes of `level2`
// tokens -> B / groups sequences each; share_root_only treats level2 as part of each suffix.
struct AttentionBenchCase {
  std::string mode = "hydragen";  // hydragen | paged | dense
  int batch = 1;
  std::int64_t prefix = 0;
  std::int64_t suffix = 1;
  int query_tokens = 1;
  int heads = 8;
  int kv_heads = 1;
  int head_dim = 128;
  DType dtype = DType::bf16;
  int page_size = 64;
  int groups = 0;
  std::int64_t level2 = 0;
  bool share_root_only = false;
  int warmup = 5;
  int repeats = 20;
};

struct AttentionBenchTiming {
  bool skipped = false;
  std::string skip_reason;  // e.g. "out of memory: dense needs 312 GB"
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  int samples = 0;
  double shared_ms = -1;   // hydragen: the shared-segment kernel alone (median), else -1
  double flops = 0;        // useful attention FLOPs (4·rows·keys·d over all segments)
  double bytes = 0;        // fewest bytes this mode must move (K/V read once per reader, Q, O)
};

// True when a CUDA device can be used; otherwise why_not says why.
bool cuda_available(std::string* why_not);
DeviceCeilings measure_ceilings();
// The current device's total memory in bytes.
std::int64_t device_memory_bytes();
AttentionBenchTiming bench_attention(const AttentionBenchCase& bench_case);
// The fastest of a few grid shapes of a plain streaming read of `bytes` (16-byte loads, four
// in flight per thread), timed as bench_attention times a point: median ms. Small transfers
// cannot reach the copy rate (H200: 34 MB 2.5 TB/s, 135 MB 3.5, 540 MB 4.0; docs/perf-notes.md
// session 19). Sizes past 1 GiB are read as 1 GiB and scaled. Memoized per size in MB.
double bare_read_ms(double bytes);
// How bench_attention times a step (HYDRAGEN_BENCH_IDLE_START picks the old way), for the JSON.
std::string bench_timer_description();

}  // namespace hydragen::cuda
