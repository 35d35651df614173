// The server's Prometheus metrics: the engine's counters and gauges (EngineMetrics), requests
// by HTTP status, and histograms of time to first token, inter-token latency and request
// latency. Written as Prometheus' text format (version 0.0.4).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace hydragen::server {

// Cumulative buckets over fixed upper bounds (seconds), as Prometheus histograms are.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double seconds);
  // name_bucket{le="..."} lines, name_sum and name_count.
  void write(std::string& out, const std::string& name, const std::string& help) const;
  std::int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::int64_t> counts_;  // per bound (not cumulative); the last is +Inf
  double sum_ = 0;
  std::int64_t count_ = 0;
};

// Thread-safe: HTTP handlers count statuses and observe latencies; the engine thread publishes
// its metrics after each step.
class ServerMetrics {
 public:
  ServerMetrics();
  void count_status(int status);
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  void observe_request(double seconds);
  void publish(const engine::EngineMetrics& m);
  engine::EngineMetrics engine() const;
  std::string prometheus_text() const;

 private:
  mutable std::mutex mutex_;
  std::map<int, std::int64_t> statuses_;
  Histogram ttft_, itl_, request_;
  engine::EngineMetrics engine_;
};

}  // namespace hydragen::server
