// `hydragen generate`: options -> requests -> engine -> completions (stdout / JSONL) and a
// summary on stderr.
#include "generate.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_parse.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/stop_text.h"
#include "hydragen/error.h"
#include "model/model_config.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "model/weights.h"
#include "requests.h"
#ifdef HYDRAGEN_WITH_CUDA
#include "backend/cuda/cuda_attention.h"
#endif

namespace hydragen::cli {

namespace {

using Clock = std::chrono::steady_clock;

bool has_tokenizer(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "tokenizer.json") || std::filesystem::exists(dir / "tokenizer.model");
}

void check_options(const GenerateOptions& o) {
  HG_CHECK(o.model_dir.empty() != o.random_preset.empty(),
           "give exactly one of -m MODEL_DIR and --random-weights PRESET");
  const int prompts = !o.prompt.empty() + !o.prompt_file.empty() + !o.prompt_ids.empty() + !o.requests_file.empty();
  HG_CHECK(prompts == 1, "give exactly one of -p PROMPT, -f FILE, --prompt-ids IDS and --requests JSONL");
  HG_CHECK((o.prompt.empty() && o.prompt_file.empty()) || !o.model_dir.empty(),
           "-p needs a tokenizer, and --random-weights has none: pass --prompt-ids 1,2,3 instead");
  HG_CHECK(o.max_new_tokens >= 1, "--max-new-tokens must be >= 1, got ", o.max_new_tokens);
  HG_CHECK(o.n >= 1, "-n must be >= 1, got ", o.n);
  HG_CHECK(o.device == "cpu" || o.device == "cuda", "--device: expected cpu or cuda, got '", o.device, "'");
  HG_CHECK(o.page_size == 16 || o.page_size == 32 || o.page_size == 64 || o.page_size == 128,
           "--page-size: expected 16, 32, 64 or 128, got ", o.page_size);
  if (!o.model_dir.empty()) {
    HG_CHECK(std::filesystem::is_directory(o.model_dir), "-m: '", o.model_dir, "' is not a directory");
  }
}

// "20G", "512M", "1.5G", or bytes.
std::int64_t parse_bytes(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    fail("--kv-memory: expected a size like 20G or 512M, got '", text, "'");
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "B" ? 1.0
                       : unit == "K" || unit == "KiB" ? 1024.0
                       : unit == "M" || unit == "MiB" ? 1048576.0
                       : unit == "G" || unit == "GiB" ? 1073741824.0
                                                      : -1.0;
  HG_CHECK(scale > 0 && value > 0, "--kv-memory: expected a size like 20G or 512M, got '", text, "'");
  return static_cast<std::int64_t>(value * scale);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HG_CHECK(in.good(), "-f: cannot open '", path, "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Progress on stderr, at most a few times a second: tokens so far and decode tokens/s.
class Progress {
 public:
  Progress(std::FILE* log, bool enabled, std::int64_t total) : log_(log), enabled_(enabled), total_(total) {}
  void token() {
    ++tokens_;
    if (!enabled_) return;
    const auto now = Clock::now();
    if (now - last_ < std::chrono::milliseconds(250) && tokens_ < total_) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const int width = 30, filled = static_cast<int>(width * std::min<double>(1.0, double(tokens_) / total_));
    std::fprintf(log_, "\r[%s%s] %lld/%lld tokens, %.1f tok/s ", std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(), static_cast<long long>(tokens_),
                 static_cast<long long>(total_), seconds > 0 ? tokens_ / seconds : 0.0);
    std::fflush(log_);
  }
  void done() {
    if (enabled_ && tokens_ > 0) std::fputs("\n", log_);
  }

 private:
  std::FILE* log_;
  bool enabled_;
  std::int64_t total_, tokens_ = 0;
  Clock::time_point start_ = Clock::now(), last_{};
};

}  // namespace

GenerateSummary run_generate(const GenerateOptions& o, std::FILE* out, std::FILE* log) {
  check_options(o);
  const AttentionMode attention = parse_mode(o.attention);
  const ModelConfig config = o.model_dir.empty() ? load_preset(o.random_preset) : load_model_config(o.model_dir);

  std::unique_ptr<Tokenizer> tokenizer;
  if (!o.model_dir.empty() && has_tokenizer(o.model_dir)) tokenizer = load_tokenizer(o.model_dir);

  engine::GenerationRequest defaults;
  defaults.n = o.n;
  defaults.max_new_tokens = o.max_new_tokens;
  defaults.sampling = {o.temperature, o.top_k, o.top_p, o.min_p, o.seed, o.presence_penalty, o.frequency_penalty,
                       o.repetition_penalty};
  defaults.stop_strings = o.stop;
  for (std::int64_t id : o.stop_ids.empty() ? std::vector<std::int64_t>{} : parse_count_list(o.stop_ids, "--stop-id"))
    defaults.stop_token_ids.push_back(static_cast<std::int32_t>(id));
  if (tokenizer && !o.ignore_eos)
    for (TokenId eos : tokenizer->special_tokens().eos_ids) defaults.stop_token_ids.push_back(eos);

  std::vector<ParsedRequest> requests;
  if (!o.requests_file.empty()) {
    requests = read_requests_jsonl(o.requests_file, defaults, tokenizer.get());
  } else {
    ParsedRequest one{defaults, {}};
    if (!o.prompt_ids.empty()) {
      for (std::int64_t id : parse_count_list(o.prompt_ids, "--prompt-ids"))
        one.request.prompt.push_back(static_cast<std::int32_t>(id));
    } else {
      one.request.prompt = tokenizer->encode(o.prompt.empty() ? read_file(o.prompt_file) : o.prompt, true);
    }
    requests.push_back(std::move(one));
  }

  engine::RunnerOptions runner_options;
  runner_options.page_size = o.page_size;
  runner_options.kv_memory_bytes = o.kv_memory.empty() ? 0 : parse_bytes(o.kv_memory);
  runner_options.max_batch = o.max_batch;
  runner_options.cuda_graphs = o.cuda_graphs;
  const bool random = !o.random_preset.empty();
  std::unique_ptr<engine::ModelRunner> runner;
  if (o.device == "cuda") {
#ifdef HYDRAGEN_WITH_CUDA
    HG_CHECK(cuda::device_count() > 0, "--device cuda: no CUDA device found");
#else
    fail("--device cuda: this build has no CUDA backend (configure with -DHYDRAGEN_CUDA=ON)");
#endif
    runner = engine::make_cuda_runner(
        config,
        random ? random_weights(config, o.weights_seed, DType::bf16, Device::cuda)
               : load_weights(config, Checkpoint(o.model_dir), DType::bf16),
        runner_options);
  } else {
    runner = engine::make_cpu_runner(
        config, random ? random_weights(config, o.weights_seed) : load_weights(config, Checkpoint(o.model_dir)),
        runner_options);
  }

  std::int64_t total = 0;
  for (const ParsedRequest& r : requests) total += r.error.empty() ? std::int64_t{r.request.n} * r.request.max_new_tokens : 0;
  const bool single = requests.size() == 1 && requests[0].error.empty() && requests[0].request.n == 1;
  std::optional<StreamDecoder> stream;
  std::optional<engine::StopStringFilter> shown;  // streamed text stops before a stop string
  if (single && tokenizer) {
    stream.emplace(*tokenizer);
    shown.emplace(requests[0].request.stop_strings);
  }
  Progress progress(log, o.progress && !single, total);

  // The completion's text, cut before the first stop string in it (as OpenAI's API does; the
  // tokens keep everything that was generated).
  auto text_of = [&](const std::vector<std::int32_t>& ids, const engine::GenerationRequest& request) {
    if (!tokenizer) return std::string();
    engine::StopStringFilter filter(request.stop_strings);
    const std::string text = filter.push(tokenizer->decode(ids, true));
    return text + filter.finish();
  };
  // --output: one JSON line per completion, written the moment it is final (so in finishing
  // order; "request" and "sample" say whose it is). A malformed request line goes first.
  std::ofstream jsonl;
  if (!o.output.empty()) {
    jsonl.open(o.output);
    HG_CHECK(jsonl.good(), "--output: cannot write '", o.output, "'");
  }
  auto write_line = [&](const nlohmann::json& line) {
    if (!jsonl.is_open()) return;
    jsonl << line.dump() << "\n";
    jsonl.flush();
  };
  for (std::size_t r = 0; r < requests.size(); ++r)
    if (!requests[r].error.empty())
      write_line({{"request", r}, {"sample", 0}, {"finish_reason", "error"}, {"error", requests[r].error}});

  engine::EngineOptions engine_options;
  engine_options.attention = attention;
  engine_options.max_running = o.max_batch;
  if (tokenizer) {
    engine_options.detokenize = [&](std::span<const std::int32_t> ids) { return tokenizer->decode(ids, true); };
  }
  engine_options.on_token = [&](const engine::TokenEvent& e) {
    progress.token();
    if (!single) return;
    if (stream) std::fputs(shown->push(stream->push(e.token)).c_str(), out);
    else std::fprintf(out, "%d ", e.token);
    std::fflush(out);
  };
  // The engine's request ids count the requests handed to it (0, 1, ...); line_of maps them back.
  std::vector<std::size_t> line_of;
  std::vector<engine::GenerationRequest> valid;
  for (std::size_t r = 0; r < requests.size(); ++r)
    if (requests[r].error.empty()) line_of.push_back(r), valid.push_back(requests[r].request);
  engine_options.on_finish = [&](const engine::Completion& c) {
    const std::size_t line_index = line_of[static_cast<std::size_t>(c.request)];
    const engine::GenerationRequest& request = requests[line_index].request;
    nlohmann::json line{{"request", line_index}, {"sample", c.sample}, {"prompt_tokens", request.prompt.size()},
                        {"tokens", c.tokens}, {"logprobs", c.logprobs}, {"finish_reason", c.finish_reason}};
    if (tokenizer) line["text"] = text_of(c.tokens, request);
    if (!c.error.empty()) line["error"] = c.error;
    write_line(line);
  };
  engine::Engine engine(*runner, engine_options);
  const std::vector<engine::Completion> completions = engine.generate(valid);
  std::vector<std::size_t> first_completion(requests.size(), SIZE_MAX);
  for (std::size_t i = 0, at = 0; i < line_of.size(); at += static_cast<std::size_t>(valid[i].n), ++i)
    first_completion[line_of[i]] = at;
  progress.done();
  if (single) {
    if (stream) std::fputs((shown->push(stream->flush()) + shown->finish()).c_str(), out);
    std::fputs("\n", out);
    std::fflush(out);  // before the summary on stderr: a terminal or a log shows them in order
  }

  // Completions in request order on stdout (without --output); errors on stderr.
  GenerateSummary summary;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    const int samples = requests[r].error.empty() ? requests[r].request.n : 1;
    for (int s = 0; s < samples; ++s) {
      if (!requests[r].error.empty()) {
        ++summary.errors;
        std::fflush(out);  // stdout and stderr in order when both go to one log
        std::fprintf(log, "request %zu: error: %s\n", r, requests[r].error.c_str());
      } else {
        const engine::Completion& c = completions[first_completion[r] + static_cast<std::size_t>(s)];
        if (!c.error.empty()) {
          ++summary.errors;
          std::fflush(out);
          std::fprintf(log, "request %zu sample %d: error: %s\n", r, s, c.error.c_str());
        } else if (!single && o.output.empty()) {
          std::fprintf(out, "=== request %zu, sample %d (%s) ===\n", r, s, c.finish_reason.c_str());
          if (tokenizer) std::fprintf(out, "%s\n", text_of(c.tokens, requests[r].request).c_str());
          else {
            for (std::int32_t id : c.tokens) std::fprintf(out, "%d ", id);
            std::fputs("\n", out);
          }
        }
        summary.tokens += static_cast<std::int64_t>(c.tokens.size());
      }
      ++summary.completions;
    }
  }

  std::fflush(out);
  const engine::EngineStats& st = engine.stats();
  const double kv_gib = double(st.peak_kv_pages) * runner->page_size() * runner->kv_bytes_per_token() / 1073741824.0;
  std::fprintf(log,
               "generate: %lld completions (%lld errors), %lld tokens on %s, %s attention\n"
               "  decode:  %lld tokens in %lld steps (%lld overlapped, %lld rows past a stop dropped), %.3f s, %.1f tok/s\n"
               "  prefill: %lld tokens, %.3f s\n"
               "  KV:      peak %.3f GiB (%lld pages of %d tokens); tokens stored once %lld vs %lld per sequence (%.1fx)\n",
               static_cast<long long>(summary.completions), static_cast<long long>(summary.errors),
               static_cast<long long>(summary.tokens), runner->device_name().c_str(), mode_name(attention),
               static_cast<long long>(st.decode_tokens), static_cast<long long>(st.decode_steps),
               static_cast<long long>(st.overlapped_steps), static_cast<long long>(st.dropped_rows), st.decode_seconds,
               st.decode_seconds > 0 ? st.decode_tokens / st.decode_seconds : 0.0,
               static_cast<long long>(st.prefill_tokens), st.prefill_seconds, kv_gib,
               static_cast<long long>(st.peak_kv_pages), runner->page_size(), static_cast<long long>(st.stored_tokens),
               static_cast<long long>(st.per_sequence_tokens),
               st.stored_tokens > 0 ? double(st.per_sequence_tokens) / st.stored_tokens : 0.0);
  return summary;
}

void register_generate(CLI::App& app) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate from one prompt, a file, or a JSONL of requests; shared prefixes are found automatically.");
  cmd->add_option("-m,--model", o->model_dir, "Hugging Face model directory (config.json, safetensors, tokenizer)");
  cmd->add_option("--random-weights", o->random_preset,
                  "Random weights of a preset instead of a checkpoint (tiny, codellama-7b, ...)");
  cmd->add_option("--weights-seed", o->weights_seed, "Seed of --random-weights")->capture_default_str();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (needs the model's tokenizer)");
  cmd->add_option("-f,--file", o->prompt_file, "Read the prompt text from a file");
  cmd->add_option("--prompt-ids", o->prompt_ids, "Prompt as comma-separated token ids (e.g. 1,2,3)");
  cmd->add_option("--requests", o->requests_file,
                  "JSONL, one request per line: prompt | prompt_ids | segments | segment_ids, and optional n, "
                  "max_new_tokens, temperature, top_p, top_k, min_p, seed, stop, stop_token_ids, presence_penalty, "
                  "frequency_penalty, repetition_penalty");
  cmd->add_option("-n", o->n, "Samples per prompt (they share the prompt's K/V)")->capture_default_str();
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate per sample")->capture_default_str();
  cmd->add_option("--temperature", o->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-p", o->top_p, "Nucleus mass (1 = off)")->capture_default_str();
  cmd->add_option("--top-k", o->top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str();
  cmd->add_option("--min-p", o->min_p, "Keep tokens with p >= min_p * p_max (0 = off)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed; sample i of a request uses seed + i")->capture_default_str();
  cmd->add_option("--presence-penalty", o->presence_penalty, "Minus this for each token generated before, [-2, 2]")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", o->frequency_penalty,
                  "Minus this per time a token was generated before, [-2, 2]")
      ->capture_default_str();
  cmd->add_option("--repetition-penalty", o->repetition_penalty,
                  "Divide (> 0) or multiply (<= 0) the logit of a prompt or generated token (1 = off)")
      ->capture_default_str();
  cmd->add_option("--stop", o->stop, "Stop string (repeatable)");
  cmd->add_option("--stop-id", o->stop_ids, "Stop token ids, comma-separated (EOS is one unless --ignore-eos)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at the tokenizer's EOS");
  cmd->add_option("--device", o->device, "cpu (fp32) or cuda (bf16)")->capture_default_str();
  cmd->add_option("--attention", o->attention, "hydragen, paged, dense or none")->capture_default_str();
  cmd->add_option("--output", o->output, "Write completions as JSONL");
  cmd->add_option("--page-size", o->page_size, "KV page size in tokens")->capture_default_str();
  cmd->add_option("--kv-memory", o->kv_memory, "KV pool size (e.g. 20G); default: free memory after weights");
  cmd->add_option("--max-batch", o->max_batch, "Most sequences decoded together")->capture_default_str();
  cmd->add_flag("!--no-cuda-graphs", o->cuda_graphs, "Launch every kernel of a decode step (no CUDA graphs)");
  cmd->add_flag("!--no-progress", o->progress, "No progress line on stderr");
  cmd->callback([o] { run_generate(*o, stdout, stderr); });
}

}  // namespace hydragen::cli
