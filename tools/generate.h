// `hydragen generate`: greedy decoding of one prompt on a Hugging Face checkpoint or random
// weights of a preset, on the CPU (fp32) or a CUDA device (bf16), streaming the text. A first
// step of issue 5's generate: sampling, batches and CUDA graphs come later.
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
  std::uint64_t seed = 0;      // of the random weights
  std::string prompt;          // -p: text, tokenized with the model's tokenizer
  std::string prompt_ids;      // --prompt-ids 1,2,3: token ids instead of text
  std::int64_t max_new_tokens = 32;
  std::string device = "cpu";
  std::string attention = "hydragen";
};

// Runs one generation: the text (or, without a tokenizer, the ids) goes to `out` as each
// token is chosen, a closing line with tokens/s to `log`. Returns the new token ids.
// Bad options or inputs are hydragen::Error.
std::vector<std::int32_t> run_generate(const GenerateOptions& options, std::FILE* out, std::FILE* log);

void register_generate(CLI::App& app);

}  // namespace hydragen::cli
