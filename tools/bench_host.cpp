// `hydragen bench host`: the engine's host work per decode step, with a model runner that
// computes nothing (tokens come back at once). What a GPU step's wall time carries on top of
// its device time from the engine (layout, plan, rows, bookkeeping), measurable without a
// GPU. The engine runs step by step (EngineOptions::overlap_steps off, which would hide all
// of it under the device's work when the batch holds). Each point runs with and without
// EngineOptions::plan_ahead; "overlapped" is the part
// done inside ModelRunner::step's while_running, which a CUDA runner does while the device
// runs the step; "critical" is the rest. The CUDA runner's own host work (staging, plan
// upload, graph launch, synchronisation) is not in it.
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_attention.h"
#include "bench_report.h"
#include "build_info.h"
#include "cli_parse.h"
#include "engine/engine.h"
#include "hydragen/error.h"
#include "model/presets.h"

namespace hydragen::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

struct HostOptions {
  std::string presets = "codellama-13b";
  std::string batch = "32,1024";
  std::string prefix = "1K,16K";
  std::string modes = "hydragen,paged";
  int steps = 30;
  std::string json_path;
};

// A runner without a model: plan options of an H200 (264 shared slots, 132 for full-tile
// plans, 1584 suffix slots), tokens of 5, while_running timed.
class NullRunner final : public engine::ModelRunner {
 public:
  NullRunner(ModelConfig config, std::int64_t kv_pages) : config_(std::move(config)), kv_pages_(kv_pages) {}
  const ModelConfig& config() const override { return config_; }
  int page_size() const override { return 64; }
  std::int64_t kv_pages() const override { return kv_pages_; }
  std::int64_t kv_bytes_per_token() const override { return 1; }
  std::string device_name() const override { return "none (host work only)"; }
  std::int64_t max_step_rows() const override { return std::int64_t{1} << 30; }
  plan::PlanOptions plan_options(AttentionMode mode) const override {
    plan::PlanOptions o;
    o.mode = mode;
    o.shared_slots = 264, o.shared_full_tile_slots = 132, o.suffix_slots = 1584;
    o.shared_split_past_one_wave = true;
    return o;
  }
  engine::SampledTokens step(const StepRows& rows, const plan::AttentionPlan*,
                             const engine::StepSampling* sampling, const std::function<void()>& while_running,
                             bool /*plan_prepared*/) override {
    const auto start = Clock::now();
    if (while_running) while_running();
    overlapped_seconds += seconds_since(start);
    engine::SampledTokens out;
    if (sampling != nullptr) out.tokens.assign(static_cast<std::size_t>(rows.size()), 5), out.logprobs.assign(static_cast<std::size_t>(rows.size()), 0.f);
    return out;
  }
  void copy_slots(std::span<const std::int32_t>, std::span<const std::int32_t>) override {}
  double overlapped_seconds = 0;

 private:
  ModelConfig config_;
  std::int64_t kv_pages_;
};

void run_host(const HostOptions& o) {
  HG_CHECK(o.steps >= 1, "bench host: --steps must be >= 1, got ", o.steps);
  nlohmann::json report{{"tool", "hydragen bench host"}, {"version", cli::version()}, {"git_commit", cli::git_commit()},
                        {"date", cli::utc_now_iso()}, {"device", "cpu (host work of the engine only)"},
                        {"settings", {{"steps", o.steps}}}};
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-14s %-9s %6s %7s %6s %9s %9s %9s %8s\n", "preset", "mode", "batch", "prefix", "ahead", "step ms",
              "overlap", "critical", "ahead/n");
  for (const std::string& preset : cli::parse_word_list(o.presets, "--presets")) {
    ModelConfig config = load_preset(preset);
    for (const std::int64_t batch : cli::parse_count_list(o.batch, "--batch"))
      for (const std::int64_t prefix : cli::parse_count_list(o.prefix, "--prefix"))
        for (const std::string& mode : cli::parse_word_list(o.modes, "--modes"))
          for (const bool ahead : {false, true}) {
            config.max_position_embeddings = 0;  // any prefix
            const std::int64_t new_tokens = o.steps + 3;
            const std::int64_t pages = (prefix + 63) / 64 + batch * ((new_tokens + 63) / 64 + 1) + 64;
            NullRunner runner(config, pages);
            engine::EngineOptions options;
            options.attention = parse_mode(mode);
            options.plan_ahead = ahead;
            options.overlap_steps = false;  // (plan_ahead is the step-by-step engine's overlap)
            options.max_running = batch;
            engine::Engine engine(runner, options);
            std::mt19937 rng(1);
            engine::GenerationRequest request;
            for (std::int64_t i = 0; i < prefix; ++i)
              request.prompt.push_back(3 + static_cast<std::int32_t>(rng() % (config.vocab_size - 3)));
            request.n = static_cast<int>(batch);
            request.max_new_tokens = new_tokens;
            engine.submit(request, 0);
            engine.admit_and_prefill();
            engine.decode_step();  // the first step builds its own plan either way
            const double overlapped0 = runner.overlapped_seconds;
            const std::int64_t ahead0 = engine.stats().plans_built_ahead;
            const auto start = Clock::now();
            for (int s = 0; s < o.steps; ++s) engine.decode_step();
            const double step_ms = seconds_since(start) / o.steps * 1e3;
            const double overlap_ms = (runner.overlapped_seconds - overlapped0) / o.steps * 1e3;
            const std::int64_t built_ahead = engine.stats().plans_built_ahead - ahead0;
            std::printf("%-14s %-9s %6lld %7lld %6s %9.3f %9.3f %9.3f %5lld/%d\n", preset.c_str(), mode.c_str(),
                        static_cast<long long>(batch), static_cast<long long>(prefix), ahead ? "on" : "off", step_ms,
                        overlap_ms, step_ms - overlap_ms, static_cast<long long>(built_ahead), o.steps);
            std::fflush(stdout);
            rows.push_back({{"preset", preset}, {"mode", mode}, {"batch", batch}, {"prefix", prefix},
                            {"plan_ahead", ahead}, {"step_ms", step_ms}, {"overlapped_ms", overlap_ms},
                            {"critical_ms", step_ms - overlap_ms}, {"plans_built_ahead", built_ahead}});
          }
  }
  report["rows"] = rows;
  if (!o.json_path.empty()) write_json_file(o.json_path, report);
}

}  // namespace

void register_bench_host(CLI::App& bench) {
  auto o = std::make_shared<HostOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "host", "The engine's host work per decode step (a runner without a model): with and without plan-ahead");
  cmd->add_option("--presets", o->presets, "Model presets (shapes only), comma-separated")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Batch sizes")->capture_default_str();
  cmd->add_option("--prefix", o->prefix, "Shared prefix lengths")->capture_default_str();
  cmd->add_option("--modes", o->modes, "hydragen, paged, dense, none")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Decode steps timed per point")->capture_default_str();
  cmd->add_option("--json", o->json_path, "Write the results as JSON");
  cmd->callback([o] { run_host(*o); });
}

}  // namespace hydragen::bench
