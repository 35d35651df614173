// One row/report structure for every attention benchmark backend (CPU and CUDA): the
// point's shape, the measured times, the work model (useful FLOPs, bytes the mode must move),
// and what follows from them against the ceilings measured in the same run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hydragen::bench {

// A shape of the sweep: B sequences under one prefix (or a two-level tree: the root prefix,
// `groups` nodes of `level2` tokens, B / groups sequences each), each with its own suffix.
struct AttentionPoint {
  std::int64_t batch = 1;
  std::int64_t prefix = 0;
  std::int64_t suffix = 1;
  std::int64_t query_tokens = 1;
  std::int64_t heads = 8;
  std::int64_t kv_heads = 1;
  std::int64_t head_dim = 128;
  std::int64_t groups = 0;  // 0: one level
  std::int64_t level2 = 0;
};

struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
  int samples = 0;
  double shared_ms = -1;  // the shared-segment part alone, when the backend reports it
};

struct AttentionRow {
  AttentionPoint point;
  std::string mode;            // hydragen | hydragen-root | paged | dense
  bool skipped = false;
  std::string skip_reason;     // "out of memory: needs 34.4 GB (budget 17.2 GB)"
  Timing timing;
  double flops = 0;            // useful FLOPs: 4·Hq·d·(keys per query row), same for every mode
  double bytes = 0;            // bytes this mode must move at least
  double kv_bytes_held = 0;    // K/V memory the mode holds (0 if unknown)
  nlohmann::json extra = nlohmann::json::object();  // backend notes (CPU: load average)
  // Filled by finish_point():
  std::optional<double> speedup_vs_paged;
};

// The device's ceilings measured in the same run; floor = max(flops/peak, bytes/bandwidth).
struct Ceilings {
  std::string device;
  double peak_flops_per_s = 0;
  std::string peak_flops_source;  // "cblas_sgemm 4096x4096x4096 fp32"
  double bandwidth_bytes_per_s = 0;
  std::string bandwidth_source;   // "multi-threaded read of 1024 MiB"
  nlohmann::json extra = nlohmann::json::object();  // anything else measured (copy rate, ...)
};

// How numbers are shown: the CPU in GFLOP/s and GB/s, a GPU in TFLOP/s and TB/s.
struct DisplayUnits {
  double rate_scale = 1e9;
  const char* flops_label = "GFLOP/s";
  const char* bytes_label = "GB/s";
};
DisplayUnits cpu_units();
DisplayUnits gpu_units();

// Fills speedup_vs_paged for the rows of one point (all modes of the same shape).
void finish_point(std::vector<AttentionRow>& point_rows);

double floor_ms(const AttentionRow& row, const Ceilings& ceilings);

// Aligned table on stdout. print_table_header once, then the rows of each point as it ends.
class TablePrinter {
 public:
  TablePrinter(DisplayUnits units, Ceilings ceilings, bool show_shared_ms);
  void print_header() const;
  void print_rows(const std::vector<AttentionRow>& rows) const;

 private:
  DisplayUnits units_;
  Ceilings ceilings_;
  bool show_shared_ms_;
};

// The whole run as JSON: tool, version, git commit, date, device, settings, ceilings, rows.
nlohmann::json report_json(const Ceilings& ceilings, const nlohmann::json& settings,
                           const std::vector<AttentionRow>& rows);
void write_json_file(const std::string& path, const nlohmann::json& report);

std::string human_gb(double bytes);  // "34.4 GB"

}  // namespace hydragen::bench
