// `hydragen bench host`: the engine's host work per decode step, with a model runner that
// computes nothing (tokens come back at once): what a GPU step's wall time carries on top of its
// device time from the engine (scheduling, layout, plan, rows, bookkeeping), measurable without
// a GPU. The engine runs step by step (EngineOptions::overlap_steps off): with overlap, a CUDA
// runner does all of it while the device runs the step before. The CUDA runner's own host work
// (staging, plan upload, graph launch, synchronisation) is not in it.
#include <algorithm>
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
// plans, 1584 suffix slots), tokens of 5.
class NullRunner final : public engine::HostModelRunner {
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
  void copy_slots(std::span<const std::int32_t>, std::span<const std::int32_t>) override {}

 private:
  engine::SampledTokens compute(const StepRows&, const plan::AttentionPlan*,
                                const engine::StepSampling& sampling) override {
    engine::SampledTokens out;
    out.tokens.assign(static_cast<std::size_t>(sampling.size()), 5);
    out.logprobs.assign(static_cast<std::size_t>(sampling.size()), 0.f);
    return out;
  }

  ModelConfig config_;
  std::int64_t kv_pages_;
};

void run_host(const HostOptions& o) {
  HG_CHECK(o.steps >= 1, "bench host: --steps must be >= 1, got ", o.steps);
  nlohmann::json report{{"tool", "hydragen bench host"}, {"version", cli::version()}, {"git_commit", cli::git_commit()},
                        {"date", cli::utc_now_iso()}, {"device", "cpu (host work of the engine only)"},
                        {"settings", {{"steps", o.steps}}}};
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-14s %-9s %6s %7s %9s\n", "preset", "mode", "batch", "prefix", "step ms");
  for (const std::string& preset : cli::parse_word_list(o.presets, "--presets")) {
    ModelConfig config = load_preset(preset);
    for (const std::int64_t batch : cli::parse_count_list(o.batch, "--batch"))
      for (const std::int64_t prefix : cli::parse_count_list(o.prefix, "--prefix"))
        for (const std::string& mode : cli::parse_word_list(o.modes, "--modes")) {
          config.max_position_embeddings = 0;  // any prefix
          const std::int64_t new_tokens = o.steps + 3;
          const std::int64_t pages = (prefix + 63) / 64 + batch * ((new_tokens + 63) / 64 + 1) + 64;
          NullRunner runner(config, pages);
          engine::EngineOptions options;
          options.attention = parse_mode(mode);
          options.overlap_steps = false;
          options.max_running = batch;
          options.max_step_tokens = std::max<std::int64_t>(batch, 2048);
          engine::Engine engine(runner, options);
          std::mt19937 rng(1);
          engine::GenerationRequest request;
          for (std::int64_t i = 0; i < prefix; ++i)
            request.prompt.push_back(3 + static_cast<std::int32_t>(rng() % (config.vocab_size - 3)));
          request.n = static_cast<int>(batch);
          request.max_new_tokens = new_tokens;
          engine.submit(request);
          engine.admit_and_prefill();
          engine.step();  // the first decode step (its caches warm)
          const auto start = Clock::now();
          for (int s = 0; s < o.steps; ++s) engine.step();
          const double step_ms = seconds_since(start) / o.steps * 1e3;
          std::printf("%-14s %-9s %6lld %7lld %9.3f\n", preset.c_str(), mode.c_str(), static_cast<long long>(batch),
                      static_cast<long long>(prefix), step_ms);
          std::fflush(stdout);
          rows.push_back({{"preset", preset}, {"mode", mode}, {"batch", batch}, {"prefix", prefix}, {"step_ms", step_ms}});
        }
  }
  report["rows"] = rows;
  if (!o.json_path.empty()) write_json_file(o.json_path, report);
}

}  // namespace

void register_bench_host(CLI::App& bench) {
  auto o = std::make_shared<HostOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "host", "The engine's host work per decode step (a runner without a model)");
  cmd->add_option("--presets", o->presets, "Model presets (shapes only), comma-separated")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Batch sizes")->capture_default_str();
  cmd->add_option("--prefix", o->prefix, "Shared prefix lengths")->capture_default_str();
  cmd->add_option("--modes", o->modes, "hydragen, paged, dense, none")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Decode steps timed per point")->capture_default_str();
  cmd->add_option("--json", o->json_path, "Write the results as JSON");
  cmd->callback([o] { run_host(*o); });
}

}  // namespace hydragen::bench
