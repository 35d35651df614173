#include "server/metrics.h"

#include <algorithm>
#include <cstdio>

namespace hydragen::server {

namespace {

std::string number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

void metric(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, double value, const std::string& labels = "") {
  out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number(value) + "\n";
}

std::vector<double> latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5,
          0.75,  1,      1.5,   2,    3,     5,    7.5,   10,  20,   40,  80,  160};
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double seconds) {
  const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), seconds) - bounds_.begin();
  counts_[static_cast<std::size_t>(at)] += 1;
  sum_ += seconds;
  count_ += 1;
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
  metric(out, name, "histogram", help);
  std::int64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    sample(out, name + "_bucket", static_cast<double>(cumulative), "le=\"" + number(bounds_[i]) + "\"");
  }
  sample(out, name + "_bucket", static_cast<double>(count_), "le=\"+Inf\"");
  sample(out, name + "_sum", sum_);
  sample(out, name + "_count", static_cast<double>(count_));
}

ServerMetrics::ServerMetrics() : ttft_(latency_bounds()), itl_(latency_bounds()), request_(latency_bounds()) {}

void ServerMetrics::count_status(int status) {
  std::lock_guard lock(mutex_);
  statuses_[status] += 1;
}
void ServerMetrics::observe_ttft(double s) {
  std::lock_guard lock(mutex_);
  ttft_.observe(s);
}
void ServerMetrics::observe_itl(double s) {
  std::lock_guard lock(mutex_);
  itl_.observe(s);
}
void ServerMetrics::observe_request(double s) {
  std::lock_guard lock(mutex_);
  request_.observe(s);
}
void ServerMetrics::publish(const engine::EngineMetrics& m) {
  std::lock_guard lock(mutex_);
  engine_ = m;
}
engine::EngineMetrics ServerMetrics::engine() const {
  std::lock_guard lock(mutex_);
  return engine_;
}

std::string ServerMetrics::prometheus_text() const {
  std::lock_guard lock(mutex_);
  const engine::EngineMetrics& m = engine_;
  std::string out;
  metric(out, "hydragen_http_requests_total", "counter", "HTTP requests answered, by status");
  for (const auto& [status, count] : statuses_)
    sample(out, "hydragen_http_requests_total", static_cast<double>(count), "status=\"" + std::to_string(status) + "\"");
  metric(out, "hydragen_sequences_finished_total", "counter", "Completions (one per sample) by finish reason");
  sample(out, "hydragen_sequences_finished_total", static_cast<double>(m.finished_stop), "reason=\"stop\"");
  sample(out, "hydragen_sequences_finished_total", static_cast<double>(m.finished_length), "reason=\"length\"");
  sample(out, "hydragen_sequences_finished_total", static_cast<double>(m.finished_cancelled), "reason=\"cancelled\"");
  sample(out, "hydragen_sequences_finished_total", static_cast<double>(m.finished_error), "reason=\"error\"");
  const std::pair<const char*, std::pair<std::int64_t, const char*>> counters[] = {
      {"hydragen_engine_requests_total", {m.requests, "Requests submitted to the engine (one per prompt)"}},
      {"hydragen_prompt_tokens_total", {m.prompt_tokens, "Prompt tokens of the requests admitted"}},
      {"hydragen_generation_tokens_total", {m.generated_tokens, "Tokens generated"}},
      {"hydragen_prefix_cache_query_tokens_total", {m.prefix_cache_query_tokens, "Prompt tokens sequences needed from the prefix tree"}},
      {"hydragen_prefix_cache_hit_tokens_total", {m.prefix_cache_hit_tokens, "Of those, tokens found cached (not prefilled again)"}},
      {"hydragen_preemptions_total", {m.preemptions, "Sequences preempted for pages"}},
  };
  for (const auto& [name, value] : counters) {
    metric(out, name, "counter", value.second);
    sample(out, name, static_cast<double>(value.first));
  }
  const std::pair<const char*, std::pair<std::int64_t, const char*>> gauges[] = {
      {"hydragen_running_sequences", {m.running, "Sequences prefilling or decoding"}},
      {"hydragen_waiting_sequences", {m.waiting, "Sequences waiting for admission"}},
      {"hydragen_kv_pages", {m.kv_pages, "KV pages in the pool"}},
      {"hydragen_kv_pages_used", {m.kv_pages_used, "KV pages in use"}},
      {"hydragen_kv_pages_cached", {m.kv_pages_cached, "KV pages held only by the prefix cache (evictable)"}},
      {"hydragen_kv_pages_shared", {m.kv_pages_shared, "KV pages of segments two or more sequences read"}},
  };
  for (const auto& [name, value] : gauges) {
    metric(out, name, "gauge", value.second);
    sample(out, name, static_cast<double>(value.first));
  }
  ttft_.write(out, "hydragen_time_to_first_token_seconds", "Time from a request's arrival to its first token");
  itl_.write(out, "hydragen_inter_token_latency_seconds", "Time between two tokens of a sequence");
  request_.write(out, "hydragen_request_latency_seconds", "Time from a request's arrival to its last token");
  return out;
}

}  // namespace hydragen::server
