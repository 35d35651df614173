// `hydragen bench e2e`: the paper's end-to-end protocol. For each model preset, batch and
// prefix: B sequences share one prompt of `prefix` random tokens; each generates
// `new_tokens` tokens (temperature 1, a seed per sequence). Decode throughput excludes the
// prefill and a warm-up step (the one that captures the CUDA graph). A point whose step is
// slow (paged/dense at long prefixes) is timed on a sample of steps spread over the suffix
// lengths and marked "sampled"; the rest run every step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <random>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_report.h"
#include "build_info.h"
#include "cli_parse.h"
#include "device_choice.h"
#include "engine/engine.h"
#include "hydragen/error.h"
#include "model/paged_kv.h"
#include "model/presets.h"
#include "model/weights.h"
#ifdef HYDRAGEN_WITH_CUDA
#include "bench/cuda/cuda_bench.h"
#endif

namespace hydragen::bench {

namespace {

using Clock = std::chrono::steady_clock;

struct E2eOptions {
  std::string device = "auto";
  std::string presets = "codellama-13b";
  std::string batch = "32,128,512,1024";  // 2048 too when asked (13B/7B report it X: their K/V does not fit one H200)
  std::string prefix = "1K,2K,4K,8K,16K";
  std::string modes = "hydragen,paged,dense,none";
  std::int64_t new_tokens = 128;
  std::string steps = "auto";       // full | sampled | auto
  double full_seconds = 20;         // auto: run every step when that takes less than this
  int sample_points = 5;            // sampled: steps timed, spread over the suffix lengths
  std::string json_path;
  std::uint64_t seed = 1;
  std::string scenario = "sweep";   // sweep | docqa | two-level
  bool overlap_steps = true;        // EngineOptions::overlap_steps (off: each step after the last is collected)
  // docqa: one document, B questions about it (the paper: 20K tokens, Yi-6B-200k)
  std::int64_t doc_tokens = 20000, question_tokens = 32;
  std::string questions = "32,64,128,256";
  // two-level: few-shot prompt -> problems -> samples (the paper: 2.4K, 300, 128, CodeLlama-7b)
  std::int64_t fewshot_tokens = 2400, problem_tokens = 300, samples = 128;
  std::string problems = "1,2,3,4";
  std::int64_t total_problems = 120;  // two-level: the whole job, done in rounds of `problems`
  std::int64_t run_job = 0;           // two-level: > 0 runs the whole job, this many problems per round
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Wall clock (plan, upload, forward, sampling, tokens back) and device time of timed steps.
struct StepClock {
  engine::Engine& engine;
  const engine::ModelRunner& runner;
  double wall_seconds = 0, device_seconds = 0;
  std::int64_t steps = 0;
  double operator()() {
    const auto start = Clock::now();
    engine.step();
    const double wall = seconds_since(start);
    wall_seconds += wall;
    device_seconds += runner.last_step_device_seconds();
    ++steps;
    return wall;
  }
};

// Mean of a piecewise-linear step time over suffix lengths [first, last], from samples
// (length, seconds) sorted by length.
double mean_step_seconds(const std::vector<std::pair<std::int64_t, double>>& samples, std::int64_t first,
                         std::int64_t last) {
  double total = 0;
  for (std::int64_t len = first; len <= last; ++len) {
    auto hi = std::lower_bound(samples.begin(), samples.end(), len,
                               [](const auto& s, std::int64_t l) { return s.first < l; });
    if (hi == samples.end()) total += samples.back().second;
    else if (hi == samples.begin() || hi->first == len) total += hi->second;
    else {
      const auto lo = hi - 1;
      const double f = double(len - lo->first) / double(hi->first - lo->first);
      total += lo->second + f * (hi->second - lo->second);
    }
  }
  return total / double(last - first + 1);
}

struct PointResult {
  nlohmann::json row;
  double tokens_per_s = 0;
};

std::vector<std::int32_t> random_prompt(std::mt19937& rng, const ModelConfig& config, std::int64_t tokens) {
  std::uniform_int_distribution<std::int32_t> token(3, static_cast<std::int32_t>(config.vocab_size) - 1);
  std::vector<std::int32_t> out;
  for (std::int64_t i = 0; i < tokens; ++i) out.push_back(token(rng));
  return out;
}

engine::GenerationRequest sampled_request(std::vector<std::int32_t> prompt, std::int64_t n, const E2eOptions& o) {
  engine::GenerationRequest request;
  request.prompt = std::move(prompt);
  request.n = static_cast<int>(n);
  request.max_new_tokens = o.new_tokens;
  request.sampling.temperature = 1.f;
  request.sampling.seed = o.seed;
  return request;
}

// `count` requests of `n` samples: the shared prefix + `tail_tokens` random tokens of their own.
std::vector<engine::GenerationRequest> requests_under(const std::vector<std::int32_t>& shared, std::int64_t count,
                                                      std::int64_t tail_tokens, std::int64_t n, std::mt19937& rng,
                                                      const ModelConfig& config, const E2eOptions& o) {
  std::vector<engine::GenerationRequest> requests;
  for (std::int64_t i = 0; i < count; ++i) {
    std::vector<std::int32_t> prompt = shared;
    const std::vector<std::int32_t> tail = random_prompt(rng, config, tail_tokens);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    requests.push_back(sampled_request(std::move(prompt), n, o));
  }
  return requests;
}

// Pages the admitted sequences of `requests` take from the step after prefill to their last
// token (the engine gives a sequence pages as it grows): new_tokens slots each past its first.
std::int64_t pages_to_grow(const std::vector<engine::GenerationRequest>& requests, AttentionMode mode,
                           int page_size, std::int64_t new_tokens) {
  auto pages = [&](std::int64_t slots) { return (slots + page_size - 1) / page_size; };
  std::int64_t total = 0;
  for (const engine::GenerationRequest& r : requests) {
    const auto tree = static_cast<std::int64_t>(r.prompt.size()) - 1;
    const std::int64_t own_prompt = mode == AttentionMode::dense ? tree
                                    : r.max_shared_tokens >= 0             ? tree - std::min(tree, r.max_shared_tokens)
                                                                           : 0;
    total += r.n * (pages(own_prompt + new_tokens) - pages(own_prompt + 1));
  }
  return total;
}

// Prefills `requests` (`batch` sequences in all) and times their decode; a row that says
// "skipped" when they do not all fit the KV pool at once, at their longest.
PointResult time_generation(engine::ModelRunner& runner, AttentionMode mode,
                            const std::vector<engine::GenerationRequest>& requests, std::int64_t batch,
                            const E2eOptions& o) {
  nlohmann::json row{{"mode", mode_name(mode)}, {"batch", batch}, {"new_tokens", o.new_tokens}};
  engine::EngineOptions eo;
  eo.attention = mode;
  eo.max_running = batch;
  eo.overlap_steps = o.overlap_steps;
  std::string refused;               // why the engine refused a request (its context, say)
  std::int64_t first_generated = 0;  // tokens of the first completion so far
  eo.on_finish = [&](const engine::Completion& c) {
    if (!c.error.empty() && !c.kv_pool_full) refused = c.error;
  };
  eo.on_token = [&](const engine::TokenEvent& e) { first_generated += e.request == 0 && e.sample == 0; };
  engine::Engine engine(runner, eo);
  for (const engine::GenerationRequest& r : requests) engine.submit(r);
  const std::int64_t running = engine.admit_and_prefill();
  row["prefill_s"] = engine.stats().prefill_seconds;
  const std::int64_t grow = pages_to_grow(requests, mode, runner.page_size(), o.new_tokens);
  if (running < batch || engine.pool().used_pages() + grow > engine.pool().num_pages()) {
    row["skipped"] = true;
    row["skip_reason"] = !refused.empty() ? "refused: " + refused
                                          : "out of memory: " + std::to_string(running) + " of " +
                                                std::to_string(batch) + " sequences fit the KV pool (" +
                                                human_gb(double(runner.kv_pages()) * runner.page_size() *
                                                         runner.kv_bytes_per_token()) + ") at their longest";
    return {row, 0};
  }
  row["skipped"] = false;
  // Step s (0-based) attends to a suffix of s + 1 tokens. Step 0 is the warm-up.
  StepClock timed_step{engine, runner};
  timed_step();
  timed_step.wall_seconds = 0, timed_step.device_seconds = 0, timed_step.steps = 0;
  std::vector<std::pair<std::int64_t, double>> samples;
  const double first = timed_step();
  samples.push_back({2, first});
  const std::int64_t steps = o.new_tokens;
  const bool full = o.steps == "full" || (o.steps == "auto" && first * double(steps) < o.full_seconds);
  double mean = 0;
  if (full) {
    while (engine.running() > 0) timed_step();
    mean = timed_step.wall_seconds / double(timed_step.steps);
    row["sampled"] = false;
    row["timed_steps"] = timed_step.steps;
  } else {
    // Suffix lengths spread over the rest of the generation; the steps between are skipped
    // (their K/V slots are allocated but not computed). Each is timed alone: with overlapped
    // steps the one after it would be in flight, and the first measure had its step launched
    // under the warm-up's.
    engine.set_overlap_steps(false);
    timed_step.wall_seconds = 0, timed_step.device_seconds = 0, timed_step.steps = 0;
    std::int64_t at = first_generated + 1;  // the next step's suffix
    samples.assign(1, {at, timed_step()});
    for (int i = 1; i < o.sample_points; ++i) {
      const std::int64_t target = 2 + (steps - 3) * i / (o.sample_points - 1);
      if (target <= at) continue;
      engine.skip_suffix_tokens(target - at - 1);
      samples.push_back({target, timed_step()});
      at = target;
    }
    mean = mean_step_seconds(samples, 1, steps);
    row["sampled"] = true;
    nlohmann::json points = nlohmann::json::array();
    for (const auto& [len, s] : samples) points.push_back({{"suffix", len}, {"step_ms", s * 1e3}});
    row["sample_steps"] = points;
  }
  row["step_ms"] = mean * 1e3;
  row["cuda_graphs"] = runner.decodes_with_graphs();
  row["decode_s"] = mean * double(steps);
  if (timed_step.device_seconds > 0) row["device_step_ms"] = timed_step.device_seconds / timed_step.steps * 1e3;
  row["tokens_per_s"] = double(batch) / mean;
  row["preemptions"] = engine.metrics().preemptions;  // 0: the pool held the batch throughout
  row["kv_peak_gb"] = double(engine.pool().peak_used_pages()) * runner.page_size() * runner.kv_bytes_per_token() / 1e9;
  return {row, double(batch) / mean};
}

void print_scenario_row(const std::string& preset, const nlohmann::json& row) {
  const bool skipped = row["skipped"].get<bool>();
  std::printf("%-14s %-10s %-9s %6lld %10s %10s %9s %9s %s\n", preset.c_str(), row["case"].get<std::string>().c_str(),
              row["mode"].get<std::string>().c_str(), static_cast<long long>(row["batch"].get<std::int64_t>()),
              skipped ? "X" : std::to_string(row["step_ms"].get<double>()).substr(0, 8).c_str(),
              skipped ? "X" : std::to_string(static_cast<long long>(row["tokens_per_s"].get<double>())).c_str(),
              std::to_string(row["prefill_s"].get<double>()).substr(0, 7).c_str(),
              skipped ? "X" : std::to_string(row["prefill_s"].get<double>() + row["decode_s"].get<double>()).substr(0, 7).c_str(),
              skipped ? row["skip_reason"].get<std::string>().c_str() : (row["sampled"].get<bool>() ? "sampled" : ""));
  std::fflush(stdout);
}

// Long-document QA: B questions (own tokens each) about one shared document; total time =
// prefill (the document once, the questions) + decode.
void run_docqa(engine::ModelRunner& runner, const ModelConfig& config, const std::string& preset,
               const std::vector<AttentionMode>& modes, const E2eOptions& o, nlohmann::json& rows) {
  std::mt19937 rng(static_cast<std::uint32_t>(o.seed));
  const std::vector<std::int32_t> doc = random_prompt(rng, config, o.doc_tokens);
  for (std::int64_t questions : cli::parse_count_list(o.questions, "--questions")) {
    const std::vector<engine::GenerationRequest> requests =
        requests_under(doc, questions, o.question_tokens, 1, rng, config, o);
    for (AttentionMode mode : modes) {
      PointResult r = time_generation(runner, mode, requests, questions, o);
      r.row["case"] = "docqa";
      r.row["preset"] = preset;
      r.row["doc_tokens"] = o.doc_tokens;
      r.row["question_tokens"] = o.question_tokens;
      if (!r.row["skipped"].get<bool>()) r.row["total_s"] = r.row["prefill_s"].get<double>() + r.row["decode_s"].get<double>();
      print_scenario_row(preset, r.row);
      rows.push_back(r.row);
    }
  }
}

// The requests as a sharing level sees them: "one-level" copies each problem into its samples'
// own pages, sharing only the few-shot prompt (GenerationRequest::max_shared_tokens).
std::vector<engine::GenerationRequest> at_level(std::vector<engine::GenerationRequest> requests,
                                                const std::string& level, const E2eOptions& o) {
  if (level == "one-level")
    for (engine::GenerationRequest& r : requests) r.max_shared_tokens = o.fewshot_tokens;
  return requests;
}

// Whole-job seconds per problems per round, per sharing level.
using JobTimes = std::map<std::string, std::map<std::int64_t, double>>;

// --run-job P: the whole two-level job (total_problems problems under `fewshot`) run through one
// engine with P x samples sequences at a time, for both sharing levels, wall clock from
// submission to the last token (prefill, every decode step, graph captures). Beside each, the
// job computed from the round timed at P problems, if one was: the check of that computation.
void run_two_level_job(engine::ModelRunner& runner, const ModelConfig& config, const std::string& preset,
                       const E2eOptions& o, const std::vector<std::int32_t>& fewshot, JobTimes& computed,
                       nlohmann::json& rows) {
  std::mt19937 rng(static_cast<std::uint32_t>(o.seed + 1));
  const std::vector<engine::GenerationRequest> requests =
      requests_under(fewshot, o.total_problems, o.problem_tokens, o.samples, rng, config, o);
  for (const char* level : {"two-level", "one-level"}) {
    const std::vector<engine::GenerationRequest> shaped = at_level(requests, level, o);
    engine::EngineOptions eo;
    eo.attention = AttentionMode::hydragen;
    eo.max_running = o.run_job * o.samples;
    eo.overlap_steps = o.overlap_steps;
    engine::Engine engine(runner, eo);
    const auto start = Clock::now();
    const std::vector<engine::Completion> out = engine.generate(shaped);
    const double seconds = seconds_since(start);
    std::int64_t tokens = 0, failed = 0;
    for (const engine::Completion& c : out) {
      tokens += static_cast<std::int64_t>(c.tokens.size());
      failed += c.error.empty() ? 0 : 1;
    }
    nlohmann::json row{{"case", std::string(level) + "-job"}, {"mode", "hydragen"}, {"preset", preset},
                       {"problems_per_round", o.run_job}, {"batch", o.run_job * o.samples},
                       {"total_problems", o.total_problems}, {"samples", o.samples}, {"new_tokens", o.new_tokens},
                       {"fewshot_tokens", o.fewshot_tokens}, {"problem_tokens", o.problem_tokens},
                       {"job_s_run", seconds}, {"tokens", tokens}, {"failed", failed},
                       {"prefill_s", engine.stats().prefill_seconds}, {"peak_running", engine.stats().peak_running}};
    const auto it = computed[level].find(o.run_job);
    std::string check;
    if (it != computed[level].end()) {
      row["job_s_computed"] = it->second;
      char text[96];
      std::snprintf(text, sizeof text, " (computed from one round: %.1f s, run / computed %.3f)", it->second,
                    seconds / it->second);
      check = text;
    }
    std::printf("%-14s   %s whole job run: %lld problems, %lld at a time (at most %lld sequences ran together), "
                "%lld tokens, %lld failed: %.1f s%s\n",
                preset.c_str(), level, static_cast<long long>(o.total_problems), static_cast<long long>(o.run_job),
                static_cast<long long>(engine.stats().peak_running), static_cast<long long>(tokens),
                static_cast<long long>(failed), seconds, check.c_str());
    std::fflush(stdout);
    rows.push_back(row);
  }
}

// Two-level sharing: few-shot prompt -> P problems -> `samples` samples each, hydragen with the
// whole tree shared ("two-level") against sharing only the few-shot prompt ("one-level", the
// problem copied into each sample's own pages). The whole job (total_problems) runs in rounds
// of P problems that all have the same shape (every sample generates new_tokens), so its time is
// computed from the one round measured: rounds x (prefill + decode), said so in the JSON and the
// table (a last, partial round counts as a whole one: 120 problems divide into rounds of 1-4).
// The summary compares the two at equal batch, and each at its fastest round size.
void run_two_level(engine::ModelRunner& runner, const ModelConfig& config, const std::string& preset,
                   const E2eOptions& o, nlohmann::json& rows) {
  HG_CHECK(o.total_problems > 0, "--total-problems must be positive, got ", o.total_problems);
  HG_CHECK(o.run_job >= 0, "--run-job must be 0 (off) or a number of problems per round, got ", o.run_job);
  std::mt19937 rng(static_cast<std::uint32_t>(o.seed));
  const std::vector<std::int32_t> fewshot = random_prompt(rng, config, o.fewshot_tokens);
  JobTimes job_at;
  for (std::int64_t problems : cli::parse_count_list(o.problems, "--problems")) {
    const std::vector<engine::GenerationRequest> requests =
        requests_under(fewshot, problems, o.problem_tokens, o.samples, rng, config, o);
    for (const char* level : {"two-level", "one-level"}) {
      PointResult r = time_generation(runner, AttentionMode::hydragen, at_level(requests, level, o),
                                      problems * o.samples, o);
      r.row["case"] = level;
      r.row["preset"] = preset;
      r.row["problems"] = problems;
      r.row["fewshot_tokens"] = o.fewshot_tokens;
      r.row["problem_tokens"] = o.problem_tokens;
      r.row["samples"] = o.samples;
      print_scenario_row(preset, r.row);
      if (!r.row["skipped"].get<bool>()) {
        const std::int64_t rounds = (o.total_problems + problems - 1) / problems;
        const double job = double(rounds) * (r.row["prefill_s"].get<double>() + r.row["decode_s"].get<double>());
        r.row["total_problems"] = o.total_problems;
        r.row["rounds"] = rounds;
        r.row["job_s_computed"] = job;
        r.row["job_basis"] = "rounds x this round's prefill + decode (computed, not run)";
        std::printf("%-14s   all %lld problems in %lld rounds of this one: %.1f s (computed)\n", preset.c_str(),
                    static_cast<long long>(o.total_problems), static_cast<long long>(rounds), job);
        job_at[level][problems] = job;
      }
      rows.push_back(r.row);
    }
  }
  if (o.run_job > 0) run_two_level_job(runner, config, preset, o, fewshot, job_at, rows);
  const auto& two_at = job_at["two-level"];
  const auto& one_at = job_at["one-level"];
  for (const auto& [problems, two] : two_at)
    if (one_at.count(problems))
      std::printf("%-14s   whole job, %lld problems per round (equal batch): two-level %.1f s, one-level %.1f s, %.2fx\n",
                  preset.c_str(), static_cast<long long>(problems), two, one_at.at(problems), one_at.at(problems) / two);
  if (!two_at.empty() && !one_at.empty()) {
    auto by_time = [](const auto& a, const auto& b) { return a.second < b.second; };
    const auto two = *std::min_element(two_at.begin(), two_at.end(), by_time);
    const auto one = *std::min_element(one_at.begin(), one_at.end(), by_time);
    std::printf("%-14s   whole job, each at its fastest round size: two-level %.1f s (%lld problems per round), "
                "one-level %.1f s (%lld), %.2fx\n",
                preset.c_str(), two.second, static_cast<long long>(two.first), one.second,
                static_cast<long long>(one.first), one.second / two.second);
  }
}

void run_e2e(const E2eOptions& o) {
  const std::string device = cli::pick_device(o.device);
  const auto batches = cli::parse_count_list(o.batch, "--batch");
  const auto prefixes = cli::parse_count_list(o.prefix, "--prefix");
  std::vector<AttentionMode> modes;
  for (const std::string& m : cli::parse_word_list(o.modes, "--modes")) modes.push_back(parse_mode(m));
  HG_CHECK(o.steps == "full" || o.steps == "sampled" || o.steps == "auto", "--steps: expected full, sampled or auto");
  HG_CHECK(o.new_tokens >= 4 && o.sample_points >= 2, "--new-tokens must be >= 4 and --sample-points >= 2");

  nlohmann::json report{{"tool", "hydragen bench e2e"}, {"version", cli::version()}, {"git_commit", cli::git_commit()},
                        {"date", cli::utc_now_iso()}};
  double gemm_flops = 0, copy_bytes = 0;
#ifdef HYDRAGEN_WITH_CUDA
  if (device == "cuda") {
    const cuda::DeviceCeilings c = cuda::measure_ceilings();
    report["device"] = c.device_name;
    gemm_flops = c.gemm_tflops * 1e12, copy_bytes = c.copy_tb_per_s * 1e12;
    report["ceilings"] = {{"gemm_tflops", c.gemm_tflops}, {"copy_tb_per_s", c.copy_tb_per_s}};
  }
#endif
  if (device != "cuda") report["device"] = "cpu";
  report["settings"] = {{"new_tokens", o.new_tokens}, {"steps", o.steps}, {"full_seconds", o.full_seconds},
                        {"sample_points", o.sample_points}, {"sampling", "temperature 1, seed per sequence"},
                        {"overlap_steps", o.overlap_steps},
                        {"throughput", "decode tokens/s excluding prefill and one warm-up step"}};
  report["settings"]["scenario"] = o.scenario;
  HG_CHECK(o.scenario == "sweep" || o.scenario == "docqa" || o.scenario == "two-level",
           "--scenario: expected sweep, docqa or two-level, got '", o.scenario, "'");
  nlohmann::json rows = nlohmann::json::array();
  if (o.scenario != "sweep")
    std::printf("%-14s %-10s %-9s %6s %10s %10s %9s %9s %s\n", "preset", "case", "mode", "batch", "step_ms", "tok/s",
                "prefill_s", "total_s", "note");
  else
  std::printf("%-14s %-9s %6s %7s %10s %10s %10s %9s %8s %8s %s\n", "preset", "mode", "batch", "prefix", "step_ms",
              "device_ms", "tok/s", "floor", "of_floor", "vs_paged", "note");
  for (const std::string& preset : cli::parse_word_list(o.presets, "--presets")) {
    ModelConfig config = load_preset(preset);
    // Random weights have no trained context: a sweep point past the preset's (CodeLlama's
    // 16384 positions < prefix 16K + 128 new tokens) widens it, and the report says so.
    const std::int64_t longest = *std::max_element(prefixes.begin(), prefixes.end()) + o.new_tokens;
    if (o.scenario == "sweep" && config.max_position_embeddings > 0 && longest > config.max_position_embeddings) {
      std::fprintf(stderr, "%s: context widened from %lld to %lld positions for prefix + new tokens (random weights)\n",
                   preset.c_str(), static_cast<long long>(config.max_position_embeddings),
                   static_cast<long long>(longest));
      report["context_widened"][preset] = {{"from", config.max_position_embeddings}, {"to", longest}};
      config.max_position_embeddings = longest;
    }
    // A batch whose own K/V (new_tokens per sequence) exceeds what this device could hold
    // after the weights can never run (13B and 7B at 2048 on one H200): its points are X
    // without a run, and the runner is not sized for it.
    const bool cuda = device == "cuda";
    const double per_token = double(PagedKv::bytes_per_token(config, cuda ? DType::bf16 : DType::f32));
    double kv_ceiling = double(engine::kCpuKvBytes);
#ifdef HYDRAGEN_WITH_CUDA
    if (cuda) kv_ceiling = double(cuda::device_memory_bytes()) - 2.0 * double(config.parameter_count());
#endif
    auto own_kv_bytes = [&](std::int64_t batch) { return double(batch) * double(o.new_tokens) * per_token; };
    std::int64_t max_batch = 0;
    for (std::int64_t batch : batches)
      if (o.scenario != "sweep" || own_kv_bytes(batch) <= kv_ceiling) max_batch = std::max(max_batch, batch);
    std::unique_ptr<engine::ModelRunner> runner;
    if (max_batch > 0) {
      engine::RunnerOptions ro;
      ro.max_batch = max_batch;
      runner = cuda ? engine::make_cuda_runner(config, random_weights(config, o.seed, DType::bf16, Device::cuda), ro)
                    : engine::make_cpu_runner(config, random_weights(config, o.seed), ro);
    }
    if (o.scenario != "sweep") {
      if (o.scenario == "docqa") run_docqa(*runner, config, preset, modes, o, rows);
      else run_two_level(*runner, config, preset, o, rows);
      report["rows"] = rows;
      if (!o.json_path.empty()) write_json_file(o.json_path, report);
      continue;
    }
    for (std::int64_t prefix : prefixes)
      for (std::int64_t batch : batches) {
        std::vector<PointResult> point;
        double none_step = 0, paged_tps = 0;
        for (AttentionMode mode : modes) {
          std::mt19937 rng(static_cast<std::uint32_t>(o.seed + prefix));
          if (own_kv_bytes(batch) > kv_ceiling) {
            nlohmann::json row{{"mode", mode_name(mode)}, {"batch", batch}, {"new_tokens", o.new_tokens},
                               {"skipped", true}};
            row["skip_reason"] = "out of memory: the batch's own K/V (" + human_gb(own_kv_bytes(batch)) +
                                 ") exceeds the " + human_gb(kv_ceiling) +
                                 (cuda ? " the device has after the weights" : " of the CPU K/V pool");
            PointResult r{row, 0};
            r.row["prefix"] = prefix;
            r.row["preset"] = preset;
            point.push_back(std::move(r));
            continue;
          }
          PointResult r = time_generation(*runner, mode, {sampled_request(random_prompt(rng, config, prefix), batch, o)},
                                          batch, o);
          r.row["prefix"] = prefix;
          r.row["preset"] = preset;
          if (mode == AttentionMode::none && r.tokens_per_s > 0) none_step = double(batch) / r.tokens_per_s;
          if (mode == AttentionMode::paged) paged_tps = r.tokens_per_s;
          point.push_back(std::move(r));
        }
        // The floor of a step: our own `none` step + the shared prefix's attention at the
        // larger of its FLOPs at the GEMM rate and its K/V bytes (read once) at the copy rate +
        // the suffix K/V bytes (average suffix new_tokens / 2) at the copy rate. (The issue's
        // formula takes the FLOPs only; at small batch the prefix's reads take longer, so that
        // figure is no floor there: it is kept as floor_flops_only_tokens_per_s.)
        const double prefix_flops = 4.0 * double(batch) * config.num_heads * config.head_dim * double(prefix) *
                                    config.num_layers;
        const double prefix_bytes = double(prefix) * per_token;
        const double suffix_bytes = double(batch) * (double(o.new_tokens) / 2) * per_token;
        const bool have_floor = none_step > 0 && gemm_flops > 0;
        const double floor_step = have_floor ? none_step +
                                                   std::max(prefix_flops / gemm_flops, prefix_bytes / copy_bytes) +
                                                   suffix_bytes / copy_bytes
                                             : 0;
        const double flops_only_step = have_floor ? none_step + prefix_flops / gemm_flops + suffix_bytes / copy_bytes : 0;
        for (PointResult& r : point) {
          nlohmann::json& row = r.row;
          if (floor_step > 0) row["floor_tokens_per_s"] = double(batch) / floor_step;
          if (flops_only_step > 0) row["floor_flops_only_tokens_per_s"] = double(batch) / flops_only_step;
          if (floor_step > 0 && r.tokens_per_s > 0 && row["mode"] != "none") row["fraction_of_floor"] = r.tokens_per_s * floor_step / double(batch);
          if (paged_tps > 0 && r.tokens_per_s > 0) row["speedup_vs_paged"] = r.tokens_per_s / paged_tps;
          const bool skipped = row["skipped"].get<bool>();
          std::printf("%-14s %-9s %6lld %7lld %10s %10s %10s %9s %8s %8s %s\n", preset.c_str(),
                      row["mode"].get<std::string>().c_str(), static_cast<long long>(batch),
                      static_cast<long long>(prefix),
                      skipped ? "X" : std::to_string(row["step_ms"].get<double>()).substr(0, 8).c_str(),
                      row.contains("device_step_ms")
                          ? std::to_string(row["device_step_ms"].get<double>()).substr(0, 8).c_str()
                          : "-",
                      skipped ? "X" : std::to_string(static_cast<long long>(r.tokens_per_s)).c_str(),
                      floor_step > 0 ? std::to_string(static_cast<long long>(batch / floor_step)).c_str() : "-",
                      row.contains("fraction_of_floor")
                          ? std::to_string(row["fraction_of_floor"].get<double>()).substr(0, 5).c_str()
                          : "-",
                      row.contains("speedup_vs_paged")
                          ? std::to_string(row["speedup_vs_paged"].get<double>()).substr(0, 6).c_str()
                          : "-",
                      skipped ? row["skip_reason"].get<std::string>().c_str()
                              : (std::string(row["sampled"].get<bool>() ? "sampled " : "") +
                                 (device == "cuda" && !row["cuda_graphs"].get<bool>() ? "no-graphs" : ""))
                                    .c_str());
          std::fflush(stdout);
          rows.push_back(row);
        }
        report["rows"] = rows;
        if (!o.json_path.empty()) write_json_file(o.json_path, report);
      }
  }
}

}  // namespace

void register_bench_e2e(CLI::App& bench) {
  auto o = std::make_shared<E2eOptions>();
  CLI::App* cmd = bench.add_subcommand("e2e", "End-to-end decode throughput (the paper's Fig. 3/4 protocol)");
  cmd->add_option("--device", o->device, cli::kDeviceHelp)->capture_default_str();
  cmd->add_option("--presets", o->presets, "Model presets (random weights), comma-separated")->capture_default_str();
  cmd->add_option("--batch", o->batch, "Batch sizes")->capture_default_str();
  cmd->add_option("--prefix", o->prefix, "Shared prefix lengths")->capture_default_str();
  cmd->add_option("--modes", o->modes, "hydragen, paged, dense, none")->capture_default_str();
  cmd->add_option("--new-tokens", o->new_tokens, "Tokens generated per sequence")->capture_default_str();
  cmd->add_option("--steps", o->steps, "full, sampled, or auto (full when under --full-seconds)")->capture_default_str();
  cmd->add_option("--full-seconds", o->full_seconds, "auto: longest generation run in full")->capture_default_str();
  cmd->add_option("--sample-points", o->sample_points, "Steps timed when sampled")->capture_default_str();
  cmd->add_option("--json", o->json_path, "Write the results as JSON");
  cmd->add_option("--seed", o->seed, "Seed of weights, prompts and sampling")->capture_default_str();
  cmd->add_option("--overlap-steps", o->overlap_steps,
                  "Launch each decode step before the last one is collected (full runs; sampled steps run alone)")
      ->capture_default_str();
  cmd->add_option("--scenario", o->scenario, "sweep (batch x prefix), docqa, or two-level")->capture_default_str();
  cmd->add_option("--doc-tokens", o->doc_tokens, "docqa: document length")->capture_default_str();
  cmd->add_option("--questions", o->questions, "docqa: numbers of questions")->capture_default_str();
  cmd->add_option("--question-tokens", o->question_tokens, "docqa: tokens per question")->capture_default_str();
  cmd->add_option("--fewshot-tokens", o->fewshot_tokens, "two-level: root prompt length")->capture_default_str();
  cmd->add_option("--problem-tokens", o->problem_tokens, "two-level: tokens per problem")->capture_default_str();
  cmd->add_option("--samples", o->samples, "two-level: samples per problem")->capture_default_str();
  cmd->add_option("--problems", o->problems, "two-level: problems per round (one timed round each)")->capture_default_str();
  cmd->add_option("--total-problems", o->total_problems,
                  "two-level: problems of the whole job, whose time is computed from the timed round")
      ->capture_default_str();
  cmd->add_option("--run-job", o->run_job,
                  "two-level: also run the whole job, this many problems at a time (0: only compute it)")
      ->capture_default_str();
  cmd->callback([o] { run_e2e(*o); });
}

}  // namespace hydragen::bench
