#include "generate_flags.h"

#include <limits>

#include "cli_parse.h"
#include "core/utf8.h"
#include "device_choice.h"
#include "engine/model_runner.h"
#include "requests.h"

namespace hydragen::cli {

namespace {

// A flag whose text `parse` turns into its value (as it is parsed, so a bad one stops the run
// before anything loads); --help shows it as `type`, with the default `shown`.
template <class Parse>
CLI::Option* add_parsed(CLI::App& cmd, const std::string& name, const std::string& type, const std::string& help,
                        const std::string& shown, Parse parse) {
  const std::string flag = name.substr(name.rfind(',') + 1);
  CLI::Option* option = cmd.add_option_function<std::string>(
      name, [flag, parse](const std::string& text) { parse(text, flag); }, help);
  option->type_name(type);
  if (!shown.empty()) option->default_str(shown);
  return option;
}

void check_ids_below(const std::vector<std::int32_t>& ids, const char* flag, std::int64_t vocab) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= vocab)
      usage_error(flag, ": id ", ids[i], " (item ", i + 1, ") is outside the model's vocabulary [0, ", vocab, ")");
}

}  // namespace

sample::SamplingParams sampling_of(const GenerateOptions& o) {
  sample::SamplingParams p;
  p.temperature = o.temperature, p.top_k = o.top_k, p.top_p = o.top_p, p.min_p = o.min_p, p.seed = o.seed;
  p.presence_penalty = o.presence_penalty, p.frequency_penalty = o.frequency_penalty;
  p.repetition_penalty = o.repetition_penalty;
  return p;
}

void add_generate_flags(CLI::App& cmd, GenerateOptions& o) {
  GenerateOptions* p = &o;
  add_model_source_flags(cmd, o);
  cmd.add_option("-p,--prompt", o.prompt, "Prompt text (needs the model's tokenizer)");
  cmd.add_option("-f,--file", o.prompt_file, "Read the prompt text from a file (- for standard input)");
  add_parsed(cmd, "--prompt-ids", "IDS", "Prompt as comma-separated token ids (e.g. 1,2,3)", "",
             [p](const std::string& t, const std::string& f) { p->prompt_ids = parse_token_ids(t, f); });
  cmd.add_option("--requests", o.requests_file,
                 "JSONL, one request per line (- for standard input): prompt (text or token ids) | prompt_ids | "
                 "segments | segment_ids, and optional n (samples), max_tokens (or max_new_tokens), temperature, "
                 "top_p, top_k, min_p, seed, stop (a string or a list), stop_token_ids, presence_penalty, "
                 "frequency_penalty, repetition_penalty");
  add_parsed(cmd, "--samples", "N", "Completions per prompt (what OpenAI and vLLM call n); they share the prompt's K/V. "
             "At --temperature 0 they are identical", "1",
             [p](const std::string& t, const std::string& f) { p->samples = static_cast<int>(parse_integer(t, f, 1, 1 << 20)); });
  add_parsed(cmd, "--max-new-tokens", "N", "Tokens each completion may generate (what llama.cpp calls -n)", "32",
             [p](const std::string& t, const std::string& f) { p->max_new_tokens = parse_integer(t, f, 1, INT32_MAX); });
  add_parsed(cmd, "-n", "N", "", "", [](const std::string&, const std::string&) {
    usage_error("-n is ambiguous (samples in vLLM and OpenAI, tokens in llama.cpp): give --samples N for the "
                "completions per prompt or --max-new-tokens N for the tokens each generates");
  })->group("");
  add_parsed(cmd, "--temperature", "T", "0 = greedy", "0",
             [p](const std::string& t, const std::string& f) { p->temperature = parse_float(t, f); });
  add_parsed(cmd, "--top-p", "P", "Nucleus mass in (0, 1] (1 = off)", "1",
             [p](const std::string& t, const std::string& f) { p->top_p = parse_float(t, f); });
  add_parsed(cmd, "--top-k", "K", "Keep the k most likely tokens (0 = off)", "0",
             [p](const std::string& t, const std::string& f) { p->top_k = static_cast<int>(parse_integer(t, f, 0, INT32_MAX)); });
  add_parsed(cmd, "--min-p", "P", "Keep tokens with p >= min_p * p_max, min_p in [0, 1] (0 = off)", "0",
             [p](const std::string& t, const std::string& f) { p->min_p = parse_float(t, f); });
  add_parsed(cmd, "--presence-penalty", "X", "Minus this for each token generated before, [-2, 2]", "0",
             [p](const std::string& t, const std::string& f) { p->presence_penalty = parse_float(t, f); });
  add_parsed(cmd, "--frequency-penalty", "X", "Minus this per time a token was generated before, [-2, 2]", "0",
             [p](const std::string& t, const std::string& f) { p->frequency_penalty = parse_float(t, f); });
  add_parsed(cmd, "--repetition-penalty", "X",
             "Divide (> 0) or multiply (<= 0) the logit of a prompt or generated token (1 = off)", "1",
             [p](const std::string& t, const std::string& f) { p->repetition_penalty = parse_float(t, f); });
  add_parsed(cmd, "--seed", "N", "Sampling seed; sample i of a request uses seed + i", "0",
             [p](const std::string& t, const std::string& f) { p->seed = parse_unsigned(t, f); });
  cmd.add_option("--stop", o.stop, "Stop string (repeatable); the text is cut before it");
  add_parsed(cmd, "--stop-id", "IDS", "Stop token ids, comma-separated (EOS is one unless --ignore-eos)", "",
             [p](const std::string& t, const std::string& f) {
               const std::vector<std::int32_t> ids = parse_token_ids(t, f);
               p->stop_ids.insert(p->stop_ids.end(), ids.begin(), ids.end());
             });
  cmd.add_flag("--ignore-eos", o.ignore_eos,
               "Do not stop at EOS (the tokenizer's, or generation_config.json's and config.json's eos_token_id)");
  add_engine_flags(cmd, o, "KV pool size (e.g. 20G, 512M); default: what the requests need (CPU), "
                   "the free memory after the weights (CUDA)");
  cmd.add_option("--output", o.output, "Write completions as JSONL, each the moment it is final");
  cmd.add_flag("!--no-progress", o.progress, "No progress bar (it is drawn on a terminal only)");
}

void check_generate_flags(const GenerateOptions& o, std::FILE* log) {
  check_model_flags(o);
  const int prompts = !o.prompt.empty() + !o.prompt_file.empty() + !o.prompt_ids.empty() + !o.requests_file.empty();
  if (prompts != 1) usage_error("give exactly one of -p PROMPT, -f FILE, --prompt-ids IDS and --requests JSONL");
  if ((!o.prompt.empty() || !o.prompt_file.empty()) && o.model_dir.empty())
    usage_error("-p needs a tokenizer, and --random-weights has none: pass --prompt-ids 1,2,3 instead");
  const std::string range = sampling_range_error(sampling_of(o), /*as_flags=*/true);
  if (!range.empty()) usage_error(range);
  for (const std::string& stop : o.stop) {
    if (stop.empty()) usage_error("--stop: a stop string may not be empty");
    const std::size_t bad = utf8_invalid_at(stop);
    if (bad != std::string::npos)
      usage_error("--stop: '", utf8_excerpt(stop, 60), "' is not valid UTF-8 (byte ", bad,
                  "): a stop string is text, whole characters");
  }
  if (o.samples > 1 && o.temperature == 0.f)
    std::fprintf(log, "warning: --samples %d at --temperature 0 (greedy): the %d samples will be identical; give "
                      "--temperature above 0 to sample\n", o.samples, o.samples);
}

void check_against_model(const GenerateOptions& o, const ModelConfig& config) {
  check_ids_below(o.prompt_ids, "--prompt-ids", config.vocab_size);
  check_ids_below(o.stop_ids, "--stop-id", config.vocab_size);
  if (config.max_position_embeddings > 0 && o.max_new_tokens >= config.max_position_embeddings)
    usage_error("--max-new-tokens ", o.max_new_tokens, ": the model's context is ", config.max_position_embeddings,
                " positions, and a prompt takes at least one");
}

}  // namespace hydragen::cli
