// What `hydragen generate` tells a person on stderr: a progress bar while it runs (on a
// terminal only), and a closing summary in plain words that says how many completions failed
// and which.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace hydragen::cli {

struct GenerateSummary {
  std::int64_t completions = 0, errors = 0, tokens = 0;
  std::vector<std::string> failed;  // "request 2 (line 3)", one per failed request
};

// Tokens so far and decode tokens/s, redrawn in place at most a few times a second.
class Progress {
 public:
  Progress(std::FILE* log, bool enabled, std::int64_t total_tokens);
  void token();
  void done();

 private:
  using Clock = std::chrono::steady_clock;
  std::FILE* log_;
  bool enabled_;
  std::int64_t total_, tokens_ = 0;
  Clock::time_point start_ = Clock::now(), last_{};
};

struct RunDescription {
  std::string device, attention;
  int page_size = 0;
  std::int64_t kv_pages = 0, kv_bytes_per_token = 0;  // the K/V pool
};

// The closing summary: completions and tokens, failures by request, decode and prefill speed,
// the K/V cache's peak and what sharing saved.
void print_summary(std::FILE* log, const GenerateSummary& summary, const engine::EngineStats& stats,
                   const RunDescription& run);

}  // namespace hydragen::cli
