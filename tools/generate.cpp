// `hydragen generate`: flags -> requests -> engine -> completions (stdout / JSONL) and a
// summary on stderr.
#include "generate.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "cli_parse.h"
#include "completion_lines.h"
#include "core/regular_file.h"
#include "device_choice.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/stop_text.h"
#include "hydragen/error.h"
#include "model/model_config.h"
#include "model/paged_kv.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "requests.h"
#include "tokenizer/tokenizer.h"

namespace hydragen::cli {

namespace {

// A prompt file this large is no prompt (a million-token context is about 4 MB of text).
constexpr std::uint64_t kMaxPromptFileBytes = std::uint64_t{64} << 20;

// Standard input, at most max_bytes of it.
std::string read_stdin(std::uint64_t max_bytes, const char* flag) {
  std::string text;
  char buffer[1 << 16];
  for (std::size_t got; (got = std::fread(buffer, 1, sizeof buffer, stdin)) > 0;) {
    text.append(buffer, got);
    HG_CHECK(text.size() <= max_bytes, flag, ": standard input holds more than ", bytes_text(max_bytes));
  }
  return text;
}

// The text of -p, or of -f's file ("-": standard input).
std::string prompt_text(const GenerateOptions& o) {
  if (!o.prompt.empty()) return o.prompt;
  if (o.prompt_file == "-") return read_stdin(kMaxPromptFileBytes, "-f -");
  try {
    return read_regular_file(o.prompt_file, kMaxPromptFileBytes);
  } catch (const Error& e) {
    fail("-f: ", e.what());
  }
}

// The request every prompt of the command line gets, and the base a request line's fields
// override. EOS comes from the tokenizer, or without one from generation_config.json and
// config.json.
engine::GenerationRequest request_defaults(const GenerateOptions& o, const ModelConfig& config,
                                           const Tokenizer* tokenizer) {
  engine::GenerationRequest defaults;
  defaults.n = o.samples;
  defaults.max_new_tokens = o.max_new_tokens;
  defaults.sampling = sampling_of(o);
  defaults.stop_strings = o.stop;
  defaults.stop_token_ids = o.stop_ids;
  if (o.ignore_eos || o.model_dir.empty()) return defaults;
  const std::vector<TokenId> eos = model_eos_ids(o.model_dir, tokenizer, config.vocab_size);
  defaults.stop_token_ids.insert(defaults.stop_token_ids.end(), eos.begin(), eos.end());
  return defaults;
}

std::vector<ParsedRequest> build_requests(const GenerateOptions& o, const engine::GenerationRequest& defaults,
                                          const Tokenizer* tokenizer, std::FILE* log) {
  std::vector<ParsedRequest> requests;
  if (!o.requests_file.empty()) {
    requests = read_requests_jsonl(o.requests_file, defaults, tokenizer);
    HG_CHECK(!requests.empty(), "--requests: '", o.requests_file, "' holds no request (every line is blank)");
    std::int64_t greedy_multi = 0;
    for (const ParsedRequest& r : requests)
      greedy_multi += r.error.empty() && r.request.n > 1 && r.request.sampling.temperature == 0.f;
    if (greedy_multi > 0 && !(o.samples > 1 && o.temperature == 0.f))  // the flags' warning said it already
      std::fprintf(log, "warning: %lld requests ask for several samples at temperature 0 (greedy): their samples "
                        "will be identical\n", static_cast<long long>(greedy_multi));
    return requests;
  }
  ParsedRequest one{defaults, {}, 0};
  if (!o.prompt_ids.empty()) {
    one.request.prompt = o.prompt_ids;
  } else {
    if (tokenizer == nullptr)
      usage_error(o.prompt.empty() ? "-f" : "-p", ": the model directory '", o.model_dir,
                  "' has no tokenizer (tokenizer.json or tokenizer.model): give --prompt-ids 1,2,3 instead");
    try {
      one.request.prompt = tokenizer->encode(prompt_text(o), true);
    } catch (const Error& e) {
      fail(o.prompt.empty() ? "-f: " : "-p: ", e.what());
    }
  }
  requests.push_back(std::move(one));
  return requests;
}

// The CPU pool for what the requests can hold at once (each prompt in the tree, each sample's
// own pages), at most engine::kCpuKvBytes: a toy run takes a few pages, not a gigabyte.
std::int64_t cpu_pages_for(const std::vector<ParsedRequest>& requests, const ModelConfig& config, int page_size) {
  const std::int64_t most = engine::pages_for_bytes(engine::kCpuKvBytes, page_size,
                                                    PagedKv::bytes_per_token(config, DType::f32));
  auto pages = [&](std::int64_t tokens) { return (tokens + page_size - 1) / page_size; };
  std::int64_t total = 1;
  for (const ParsedRequest& r : requests) {
    if (!r.error.empty()) continue;
    const auto prompt = static_cast<std::int64_t>(r.request.prompt.size());
    total += pages(prompt) + static_cast<std::int64_t>(r.request.segment_ends.size()) + 1 +
             r.request.n * (pages(prompt + r.request.max_new_tokens) + 1);
    if (total >= most) return most;
  }
  return total;
}

// The engine calls of a run, in one place: the well-formed requests run to the end. Their
// completions come in request order, samples in order; first[r] is request r's first
// (SIZE_MAX for a malformed one, which the engine never sees).
struct EngineRun {
  std::vector<engine::Completion> completions;
  std::vector<std::size_t> first;
};
EngineRun run_engine(engine::Engine& engine, const std::vector<ParsedRequest>& requests) {
  EngineRun run;
  run.first.assign(requests.size(), SIZE_MAX);
  std::vector<engine::GenerationRequest> valid;
  std::size_t at = 0;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    if (!requests[r].error.empty()) continue;
    run.first[r] = at;
    at += static_cast<std::size_t>(requests[r].request.n);
    valid.push_back(requests[r].request);
  }
  run.completions = engine.generate(valid);
  return run;
}

std::string request_name(std::size_t r, const ParsedRequest& request) {
  return "request " + std::to_string(r) + (request.line > 0 ? " (line " + std::to_string(request.line) + ")" : "");
}

}  // namespace

GenerateSummary run_generate(const GenerateOptions& o, std::FILE* out, std::FILE* log) {
  check_generate_flags(o, log);
  const std::string device = pick_device(o.device);
  const AttentionMode attention = parse_mode(o.attention);
  HG_CHECK(o.model_dir.empty() || std::filesystem::is_directory(o.model_dir), "-m: '", o.model_dir,
           "' is not a directory");
  const ModelConfig config = o.model_dir.empty() ? load_preset(o.random_preset) : load_model_config(o.model_dir);
  check_against_model(o, config);

  const std::unique_ptr<Tokenizer> tokenizer =
      o.model_dir.empty() ? nullptr : load_model_tokenizer(o.model_dir, config.vocab_size);
  const std::vector<ParsedRequest> requests = build_requests(o, request_defaults(o, config, tokenizer.get()),
                                                             tokenizer.get(), log);

  engine::RunnerOptions runner_options = runner_options_of(o);
  if (device == "cpu" && o.kv_memory_bytes == 0) runner_options.kv_pages = cpu_pages_for(requests, config, o.page_size);
  const std::unique_ptr<engine::ModelRunner> runner = make_model_runner(o, device, config, runner_options);

  std::int64_t total = 0;
  for (const ParsedRequest& r : requests) total += r.error.empty() ? std::int64_t{r.request.n} * r.request.max_new_tokens : 0;
  const bool single = requests.size() == 1 && requests[0].error.empty() && requests[0].request.n == 1;
  std::optional<StreamDecoder> stream;
  std::optional<engine::StopStringFilter> shown;  // streamed text stops before a stop string
  if (single && tokenizer) {
    stream.emplace(*tokenizer);
    shown.emplace(requests[0].request.stop_strings);
  }
  Progress progress(log, o.progress && !single && ::isatty(::fileno(log)), total);

  // The completion's text, cut before the first stop string in it (as OpenAI's API does; the
  // tokens keep everything that was generated).
  auto text_of = [&](const std::vector<std::int32_t>& ids, const engine::GenerationRequest& request) {
    if (!tokenizer) return std::string();
    engine::StopStringFilter filter(request.stop_strings);
    const std::string text = filter.push(tokenizer->decode(ids, true));
    return text + filter.finish();
  };
  // --output: one JSON line per completion, written the moment it is final (so in finishing
  // order; "request" and "sample" say whose it is). Malformed request lines go first.
  std::ofstream jsonl;
  if (!o.output.empty()) {
    jsonl.open(o.output);
    HG_CHECK(jsonl.good(), "--output: cannot write '", o.output, "'");
  }
  auto write_line = [&](const std::string& line) {
    if (!jsonl.is_open()) return;
    jsonl << line << "\n";
    jsonl.flush();
  };
  for (std::size_t r = 0; r < requests.size(); ++r)
    if (!requests[r].error.empty()) write_line(error_line(r, requests[r].error));

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
  // The engine numbers the requests it is handed 0, 1, ... (the well-formed ones); line_of maps
  // them back to ours.
  std::vector<std::size_t> line_of;
  for (std::size_t r = 0; r < requests.size(); ++r)
    if (requests[r].error.empty()) line_of.push_back(r);
  engine_options.on_finish = [&](const engine::Completion& c) {
    const std::size_t r = line_of.at(static_cast<std::size_t>(c.request));
    const std::string text = text_of(c.tokens, requests[r].request);
    write_line(completion_line(c, r, requests[r].request.prompt.size(), tokenizer ? &text : nullptr));
  };
  engine::Engine engine(*runner, engine_options);
  const EngineRun run = run_engine(engine, requests);
  progress.done();
  if (single) {
    if (stream) std::fputs((shown->push(stream->flush()) + shown->finish()).c_str(), out);
    std::fputs("\n", out);
    std::fflush(out);  // before the summary on stderr: a terminal or a log shows them in order
  }

  // Completions in request order on stdout (without --output); errors on stderr.
  GenerateSummary summary;
  for (std::size_t r = 0; r < requests.size(); ++r) {
    bool failed = false;
    if (!requests[r].error.empty()) {
      ++summary.completions, ++summary.errors, failed = true;
      std::fflush(out);  // stdout and stderr in order when both go to one log
      std::fprintf(log, "request %zu: error: %s\n", r, requests[r].error.c_str());
    }
    for (int sample = 0; run.first[r] != SIZE_MAX && sample < requests[r].request.n; ++sample) {
      const engine::Completion& c = run.completions.at(run.first[r] + static_cast<std::size_t>(sample));
      ++summary.completions;
      if (!c.error.empty()) {
        ++summary.errors, failed = true;
        std::fflush(out);
        std::fprintf(log, "request %zu sample %d: error: %s\n", r, c.sample, c.error.c_str());
      } else if (!single && o.output.empty()) {
        std::fprintf(out, "=== request %zu, sample %d (%s) ===\n", r, c.sample, c.finish_reason.c_str());
        if (tokenizer) std::fprintf(out, "%s\n", text_of(c.tokens, requests[r].request).c_str());
        else {
          for (std::int32_t id : c.tokens) std::fprintf(out, "%d ", id);
          std::fputs("\n", out);
        }
      }
      summary.tokens += static_cast<std::int64_t>(c.tokens.size());
    }
    if (failed) summary.failed.push_back(request_name(r, requests[r]));
  }
  std::fflush(out);
  print_summary(log, summary, engine.stats(),
                {runner->device_name(), mode_name(attention), runner->page_size(), runner->kv_pages(),
                 runner->kv_bytes_per_token()});
  return summary;
}

void register_generate(CLI::App& app, int& exit_status) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Generate from one prompt, a file, or a JSONL of requests; shared prefixes are found automatically.\n"
      "Exit status: 0 when every request completed, 3 when any failed (the summary names them), 2 for a wrong "
      "command line, 1 when the run could not start.");
  add_generate_flags(*cmd, *o);
  cmd->callback([o, &exit_status] {
    exit_status = run_generate(*o, stdout, stderr).errors > 0 ? kExitRequestsFailed : kExitOk;
  });
}

}  // namespace hydragen::cli
