// `hydragen generate`: the engine from the command line. Prompts from -p, -f, --prompt-ids or
// a JSONL file of requests; -n samples each; sampling on the device; the radix tree shares
// every common prefix. Text streams to stdout for a single sequence; --output writes one JSON
// line per completion; a progress line and a closing summary go to stderr.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace hydragen::cli {

struct GenerateOptions {
  std::string model_dir;       // -m: config.json + safetensors (+ tokenizer)
  std::string random_preset;   // --random-weights PRESET instead of a checkpoint
  std::uint64_t weights_seed = 0;
  std::string prompt;          // -p: text, tokenized with the model's tokenizer
  std::string prompt_file;     // -f: the prompt text from a file
  std::string prompt_ids;      // --prompt-ids 1,2,3: token ids instead of text
  std::string requests_file;   // --requests: JSONL, one request per line
  int n = 1;
  std::int64_t max_new_tokens = 32;
  float temperature = 0.f, top_p = 1.f, min_p = 0.f;
  float presence_penalty = 0.f, frequency_penalty = 0.f, repetition_penalty = 1.f;
  int top_k = 0;
  std::uint64_t seed = 0;      // sampling seed; sample i of a request uses seed + i
  std::vector<std::string> stop;
  std::string stop_ids;
  bool ignore_eos = false;
  std::string device = "cpu";
  std::string attention = "hydragen";
  std::string output;          // --output: JSONL of completions
  int page_size = 64;
  std::string kv_memory;       // e.g. 20G, 512M; default: free memory after weights
  std::int64_t max_batch = 1024;
  bool cuda_graphs = true;
  bool progress = true;
};

struct GenerateSummary {
  std::int64_t completions = 0, errors = 0, tokens = 0;
};

// Runs the generation. Bad options are hydragen::Error; a malformed request fails alone
// (its completion carries the error). Text of a single sequence streams to `out`.
GenerateSummary run_generate(const GenerateOptions& options, std::FILE* out, std::FILE* log);

void register_generate(CLI::App& app);

}  // namespace hydragen::cli
