// The flags of `hydragen generate`, parsed and checked before anything is loaded: every
// numeric value goes through cli_parse (never an unchecked cast), and a value out of range is
// a UsageError naming the flag. What only the model can tell (ids inside its vocabulary,
// --max-new-tokens inside its context) is checked by check_against_model once it is loaded.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "model/model_config.h"
#include "model_flags.h"
#include "sample/sampling.h"

namespace hydragen::cli {

// The model and engine flags (ModelFlags), then what to generate.
struct GenerateOptions : ModelFlags {
  std::string prompt;          // -p: text, tokenized with the model's tokenizer
  std::string prompt_file;     // -f: the prompt text from a file ("-": standard input)
  std::vector<std::int32_t> prompt_ids;  // --prompt-ids 1,2,3: token ids instead of text
  std::string requests_file;   // --requests: JSONL, one request per line ("-": standard input)
  int samples = 1;             // completions per prompt (OpenAI's and vLLM's n)
  std::int64_t max_new_tokens = 32;  // tokens each completion may generate (llama.cpp's -n)
  float temperature = 0.f, top_p = 1.f, min_p = 0.f;
  float presence_penalty = 0.f, frequency_penalty = 0.f, repetition_penalty = 1.f;
  int top_k = 0;
  std::uint64_t seed = 0;      // sampling seed; sample i of a request uses seed + i
  std::vector<std::string> stop;
  std::vector<std::int32_t> stop_ids;
  bool ignore_eos = false;
  std::string output;          // --output: JSONL of completions
  bool progress = true;        // on a terminal only
};

// The sampling flags as the sampler takes them.
sample::SamplingParams sampling_of(const GenerateOptions& o);

// Registers the flags on `cmd`; their values land in `o` as they are parsed.
void add_generate_flags(CLI::App& cmd, GenerateOptions& o);

// The checks no model is needed for (one prompt source, ranges, names); warns on `log` where
// a choice is legal but likely a mistake (several greedy samples are identical).
void check_generate_flags(const GenerateOptions& o, std::FILE* log);

// The flags against the loaded model: --prompt-ids and --stop-id inside its vocabulary,
// --max-new-tokens inside its context.
void check_against_model(const GenerateOptions& o, const ModelConfig& config);

}  // namespace hydragen::cli
