#include "generate_report.h"

#include <algorithm>

namespace hydragen::cli {

Progress::Progress(std::FILE* log, bool enabled, std::int64_t total_tokens)
    : log_(log), enabled_(enabled && total_tokens > 0), total_(total_tokens) {}

void Progress::token() {
  ++tokens_;
  if (!enabled_) return;
  const auto now = Clock::now();
  if (now - last_ < std::chrono::milliseconds(250) && tokens_ < total_) return;
  last_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const int width = 30, filled = static_cast<int>(width * std::min<double>(1.0, double(tokens_) / total_));
  std::fprintf(log_, "\r[%s%s] %lld/%lld tokens, %.1f tokens/s ", std::string(filled, '#').c_str(),
               std::string(width - filled, ' ').c_str(), static_cast<long long>(tokens_), static_cast<long long>(total_),
               seconds > 0 ? tokens_ / seconds : 0.0);
  std::fflush(log_);
}

void Progress::done() {
  if (enabled_ && tokens_ > 0) std::fputs("\n", log_);
}

namespace {

// "1 token", "3 tokens".
std::string count_of(std::int64_t n, const char* thing) {
  return std::to_string(n) + " " + thing + (n == 1 ? "" : "s");
}

}  // namespace

void print_summary(std::FILE* log, const GenerateSummary& s, const engine::EngineStats& st, const RunDescription& run) {
  std::string outcome = count_of(s.completions, "completion");
  if (s.errors > 0) {
    outcome = std::to_string(s.completions - s.errors) + " of " + outcome + " done, " + std::to_string(s.errors) +
              " failed (";
    constexpr std::size_t kListed = 8;
    for (std::size_t i = 0; i < s.failed.size() && i < kListed; ++i) outcome += (i ? ", " : "") + s.failed[i];
    if (s.failed.size() > kListed) outcome += ", and " + std::to_string(s.failed.size() - kListed) + " more requests";
    outcome += "; their errors are above)";
  }
  std::fprintf(log, "generate: %s, %s, on %s with %s attention\n", outcome.c_str(), count_of(s.tokens, "token").c_str(),
               run.device.c_str(), run.attention.c_str());
  std::fprintf(log, "  decode:  %s in %s, %.3f s: %.1f tokens/s\n", count_of(st.decode_tokens, "token").c_str(),
               count_of(st.decode_steps, "step").c_str(), st.decode_seconds,
               st.decode_seconds > 0 ? st.decode_tokens / st.decode_seconds : 0.0);
  std::fprintf(log, "  prefill: %s, %.3f s\n", count_of(st.prefill_tokens, "prompt token").c_str(), st.prefill_seconds);
  const double page_mib = double(run.page_size) * run.kv_bytes_per_token / 1048576.0;
  std::fprintf(log, "  memory:  K/V pool of %lld pages of %d tokens (%.1f MiB), %lld used at the peak (%.1f MiB)",
               static_cast<long long>(run.kv_pages), run.page_size, page_mib * run.kv_pages,
               static_cast<long long>(st.peak_kv_pages), page_mib * st.peak_kv_pages);
  if (st.stored_tokens > 0)
    std::fprintf(log, "; prompts shared: %lld tokens held where a copy per sequence would hold %lld",
                 static_cast<long long>(st.stored_tokens), static_cast<long long>(st.per_sequence_tokens));
  std::fputs("\n", log);
}

}  // namespace hydragen::cli
