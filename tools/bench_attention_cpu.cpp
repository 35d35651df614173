// The CPU side of `hydragen bench attention`: tree_attention timed with steady_clock (the
// CPU has no events), caches flushed before every run, median of the timed runs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>

#include "attention_workload.h"
#include "bench_attention.h"
#include "core/thread_pool.h"
#include "cpu_ceilings.h"
#include "hydragen/error.h"

namespace hydragen::bench {

namespace {

constexpr int kMinRepeats = 3;

DType cpu_dtype(const std::string& name) {
  if (name == "auto" || name == "f32" || name == "fp32") return DType::f32;
  if (name == "bf16") return DType::bf16;
  if (name == "fp16" || name == "f16") return DType::f16;
  fail("--dtype: the CPU takes f32, bf16 or fp16 (computed in f32), got '", name, "'");
}

// /proc/loadavg: other work on the machine skews CPU timings, so the JSON records it.
std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string line;
  std::getline(file, line);
  return line;
}

// The library mode each benchmark mode runs. dense runs on a tree without segments (every
// sequence owns a copy of its context, made before timing), read per sequence: the
// FlashAttention baseline's storage, without the copy the library's dense mode makes per call.
AttentionMode library_mode(const std::string& mode) {
  if (mode == "hydragen-root") return AttentionMode::hydragen;
  if (mode == "dense") return AttentionMode::paged;
  return parse_mode(mode);
}

class CpuAttentionBench final : public AttentionBench {
 public:
  explicit CpuAttentionBench(const BenchAttentionOptions& options)
      : options_(options), dtype_(cpu_dtype(options.dtype)) {
    HG_CHECK(options.repeats >= 1, "--repeats must be at least 1, got ", options.repeats);
    HG_CHECK(options.warmup >= 0, "--warmup must be >= 0, got ", options.warmup);
    budget_bytes_ = options.memory_budget_gb > 0 ? options.memory_budget_gb * 1e9
                                                 : 0.75 * physical_memory_bytes();
  }

  Ceilings ceilings() override { return measure_cpu_ceilings(); }
  DisplayUnits units() const override { return cpu_units(); }
  bool reports_shared_ms() const override { return false; }

  nlohmann::json settings() const override {
    return {{"device", "cpu"},
            {"dtype", dtype_name(dtype_)},
            {"memory_budget_bytes", budget_bytes_},
            {"point_seconds", options_.point_seconds},
            {"min_repeats", kMinRepeats},
            {"timer", "std::chrono::steady_clock, 128 MiB cache flush before every run"},
            {"threads", ThreadPool::global().workers()},
            {"loadavg_at_start", load_average()},
            {"seed", options_.seed}};
  }

  std::vector<AttentionRow> measure(const AttentionPoint& point,
                                    const std::vector<std::string>& modes) override {
    const double element_bytes = static_cast<double>(dtype_bytes(dtype_));
    const AttentionWorkload workload = make_workload(point, dtype_, options_.seed);
    SharingTree shared_tree;  // hydragen and paged run on the same tree
    std::vector<AttentionRow> rows;
    for (const std::string& mode : modes) {
      AttentionRow row;
      row.point = point;
      row.mode = mode;
      row.flops = attention_useful_flops(point);
      row.bytes = attention_min_bytes(point, mode, element_bytes);
      row.kv_bytes_held = attention_kv_bytes_held(point, mode, element_bytes);
      if (row.kv_bytes_held > budget_bytes_) {
        row.skipped = true;
        row.skip_reason = "out of memory: K/V needs " + human_gb(row.kv_bytes_held) +
                          " (budget " + human_gb(budget_bytes_) + ")";
        rows.push_back(row);
        continue;
      }
      const bool on_shared_tree = mode == "hydragen" || mode == "paged";
      if (on_shared_tree && shared_tree.sequences.empty()) {
        shared_tree = make_tree(workload, point, mode);
      }
      const SharingTree own_tree = on_shared_tree ? SharingTree{} : make_tree(workload, point, mode);
      const SharingTree& tree = on_shared_tree ? shared_tree : own_tree;
      TreeAttentionOptions attention_options;
      attention_options.mode = library_mode(mode);
      row.timing = time_runs([&] { (void)tree_attention(tree, workload.q, attention_options); });
      row.extra["loadavg"] = load_average();  // after the runs: other work skews CPU timings
      rows.push_back(row);
    }
    return rows;
  }

 private:
  // Warm-up, then `repeats` timed runs, fewer (at least kMinRepeats) when the warm-up says
  // they would take longer than point_seconds.
  Timing time_runs(const std::function<void()>& run) {
    using Clock = std::chrono::steady_clock;
    auto timed = [&] {
      flusher_.flush();
      const auto start = Clock::now();
      run();
      return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    };
    double estimate_ms = timed();  // at least one untimed run
    for (int i = 1; i < options_.warmup && estimate_ms < 250 * options_.point_seconds; ++i) {
      estimate_ms = timed();
    }
    int repeats = options_.repeats;
    const double budget_ms = 1e3 * options_.point_seconds;
    if (estimate_ms * repeats > budget_ms) {
      repeats = std::max(kMinRepeats, static_cast<int>(budget_ms / std::max(estimate_ms, 1e-3)));
      repeats = std::min(repeats, options_.repeats);
    }
    std::vector<double> samples_ms;
    for (int i = 0; i < repeats; ++i) samples_ms.push_back(timed());
    std::sort(samples_ms.begin(), samples_ms.end());
    Timing t;
    const std::size_t n = samples_ms.size();
    t.median_ms = n % 2 ? samples_ms[n / 2] : 0.5 * (samples_ms[n / 2 - 1] + samples_ms[n / 2]);
    t.min_ms = samples_ms.front();
    t.max_ms = samples_ms.back();
    t.samples = static_cast<int>(n);
    return t;
  }

  BenchAttentionOptions options_;
  DType dtype_;
  double budget_bytes_ = 0;
  CacheFlusher flusher_;
};

}  // namespace

std::unique_ptr<AttentionBench> make_cpu_attention_bench(const BenchAttentionOptions& options) {
  return std::make_unique<CpuAttentionBench>(options);
}

}  // namespace hydragen::bench
