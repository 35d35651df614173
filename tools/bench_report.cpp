#include "bench_report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "build_info.h"
#include "hydragen/error.h"

namespace hydragen::bench {

namespace {

// 16384 -> "16K", 64 -> "64", 1536 -> "1536".
std::string tokens_str(std::int64_t n) {
  if (n >= 1024 && n % 1024 == 0) return std::to_string(n / 1024) + "K";
  return std::to_string(n);
}

std::string prefix_str(const AttentionPoint& p) {
  if (p.groups == 0) return tokens_str(p.prefix);
  return tokens_str(p.prefix) + "+" + std::to_string(p.groups) + "x" + tokens_str(p.level2);
}

std::string shape_str(const AttentionPoint& p) {
  return std::to_string(p.heads) + "/" + std::to_string(p.kv_heads) + "/" +
         std::to_string(p.head_dim);
}

nlohmann::json point_json(const AttentionPoint& p) {
  return {{"batch", p.batch},       {"prefix", p.prefix},       {"suffix", p.suffix},
          {"query_tokens", p.query_tokens}, {"heads", p.heads}, {"kv_heads", p.kv_heads},
          {"head_dim", p.head_dim}, {"groups", p.groups},       {"level2", p.level2}};
}

}  // namespace

DisplayUnits cpu_units() { return {1e9, "GFLOP/s", "GB/s"}; }
DisplayUnits gpu_units() { return {1e12, "TFLOP/s", "TB/s"}; }

std::string human_gb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, bytes < 1e10 ? "%.2f GB" : "%.1f GB", bytes / 1e9);
  return text;
}

void finish_point(std::vector<AttentionRow>& point_rows) {
  const auto paged = std::find_if(point_rows.begin(), point_rows.end(), [](const AttentionRow& r) {
    return r.mode == "paged" && !r.skipped;
  });
  for (AttentionRow& row : point_rows) {
    row.speedup_vs_paged.reset();
    if (paged != point_rows.end() && !row.skipped && row.timing.median_ms > 0) {
      row.speedup_vs_paged = paged->timing.median_ms / row.timing.median_ms;
    }
  }
}

double floor_ms(const AttentionRow& row, const Ceilings& ceilings) {
  const double compute_s = ceilings.peak_flops_per_s > 0 ? row.flops / ceilings.peak_flops_per_s : 0;
  const double memory_s =
      ceilings.bandwidth_bytes_per_s > 0 ? row.bytes / ceilings.bandwidth_bytes_per_s : 0;
  return 1e3 * std::max(compute_s, memory_s);
}

TablePrinter::TablePrinter(DisplayUnits units, Ceilings ceilings, bool show_shared_ms)
    : units_(units), ceilings_(std::move(ceilings)), show_shared_ms_(show_shared_ms) {}

void TablePrinter::print_header() const {
  std::printf("%-11s %6s %12s %6s %-13s %10s %9s %9s %8s %6s %6s %7s%s\n", "Hq/Hkv/d", "batch",
              "prefix", "suffix", "mode", "ms", units_.flops_label, units_.bytes_label,
              "vs paged", "%peak", "%bw", "x floor", show_shared_ms_ ? "  shared ms" : "");
  std::fflush(stdout);
}

void TablePrinter::print_rows(const std::vector<AttentionRow>& rows) const {
  for (const AttentionRow& row : rows) {
    const AttentionPoint& p = row.point;
    std::printf("%-11s %6lld %12s %6s %-13s ", shape_str(p).c_str(),
                static_cast<long long>(p.batch), prefix_str(p).c_str(),
                tokens_str(p.suffix).c_str(), row.mode.c_str());
    if (row.skipped) {
      std::printf("%10s  %s\n", "X", row.skip_reason.c_str());
      continue;
    }
    const double seconds = row.timing.median_ms / 1e3;
    const double flops_rate = row.flops / seconds;
    const double bytes_rate = row.bytes / seconds;
    char speedup[16] = "-";
    if (row.speedup_vs_paged) std::snprintf(speedup, sizeof speedup, "%.2fx", *row.speedup_vs_paged);
    const double floor = floor_ms(row, ceilings_);
    std::printf("%10.3f %9.2f %9.2f %8s %5.1f%% %5.1f%% %7.2f", row.timing.median_ms,
                flops_rate / units_.rate_scale, bytes_rate / units_.rate_scale, speedup,
                100 * flops_rate / ceilings_.peak_flops_per_s,
                100 * bytes_rate / ceilings_.bandwidth_bytes_per_s,
                floor > 0 ? row.timing.median_ms / floor : 0.0);
    if (show_shared_ms_ && row.timing.shared_ms >= 0) std::printf("  %9.3f", row.timing.shared_ms);
    std::printf("\n");
  }
  std::fflush(stdout);
}

nlohmann::json report_json(const Ceilings& ceilings, const nlohmann::json& settings,
                           const std::vector<AttentionRow>& rows) {
  nlohmann::json out;
  out["tool"] = "hydragen bench attention";
  out["version"] = cli::version();
  out["git_commit"] = cli::git_commit();
  out["date"] = cli::utc_now_iso();
  out["device"] = ceilings.device;
  out["settings"] = settings;
  out["ceilings"] = {{"peak_flops_per_s", ceilings.peak_flops_per_s},
                     {"peak_flops_source", ceilings.peak_flops_source},
                     {"bandwidth_bytes_per_s", ceilings.bandwidth_bytes_per_s},
                     {"bandwidth_source", ceilings.bandwidth_source},
                     {"extra", ceilings.extra}};
  nlohmann::json rows_json = nlohmann::json::array();
  for (const AttentionRow& row : rows) {
    nlohmann::json r = point_json(row.point);
    r["mode"] = row.mode;
    r["skipped"] = row.skipped;
    if (row.skipped) r["skip_reason"] = row.skip_reason;
    r["flops"] = row.flops;
    r["bytes"] = row.bytes;
    r["kv_bytes_held"] = row.kv_bytes_held;
    if (!row.skipped) {
      const double seconds = row.timing.median_ms / 1e3;
      r["median_ms"] = row.timing.median_ms;
      r["min_ms"] = row.timing.min_ms;
      r["max_ms"] = row.timing.max_ms;
      r["samples"] = row.timing.samples;
      if (row.timing.shared_ms >= 0) r["shared_ms"] = row.timing.shared_ms;
      r["flops_per_s"] = row.flops / seconds;
      r["bytes_per_s"] = row.bytes / seconds;
      r["floor_ms"] = floor_ms(row, ceilings);
      r["measured_over_floor"] = row.timing.median_ms / floor_ms(row, ceilings);
      r["fraction_of_peak_flops"] = row.flops / seconds / ceilings.peak_flops_per_s;
      r["fraction_of_bandwidth"] = row.bytes / seconds / ceilings.bandwidth_bytes_per_s;
    }
    if (row.speedup_vs_paged) r["speedup_vs_paged"] = *row.speedup_vs_paged;
    r.update(row.extra);
    rows_json.push_back(std::move(r));
  }
  out["rows"] = std::move(rows_json);
  return out;
}

void write_json_file(const std::string& path, const nlohmann::json& report) {
  std::ofstream file(path);
  HG_CHECK(file.good(), "--json: cannot open '", path, "' for writing");
  file << report.dump(2) << "\n";
  HG_CHECK(file.good(), "--json: writing '", path, "' failed");
}

}  // namespace hydragen::bench
