// `hydragen generate`: load (or make) a model, tokenize the prompt, decode greedily through
// the model's greedy path and stream the text as each token is chosen.
#include "generate.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>

#include "cli_parse.h"
#include "hydragen/attention.h"
#include "hydragen/error.h"
#include "model/greedy.h"
#include "model/llama.h"
#include "model/llama_cuda.h"
#include "model/model_config.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "model/tokenizer.h"
#include "model/weights.h"
#ifdef HYDRAGEN_WITH_CUDA
#include "backend/cuda/cuda_attention.h"
#endif

namespace hydragen::cli {

namespace {

bool has_tokenizer(const std::filesystem::path& dir) {
  return std::filesystem::exists(dir / "tokenizer.json") || std::filesystem::exists(dir / "tokenizer.model");
}

void check_options(const GenerateOptions& o) {
  HG_CHECK(o.model_dir.empty() != o.random_preset.empty(),
           "give exactly one of -m MODEL_DIR and --random-weights PRESET");
  HG_CHECK(o.prompt.empty() != o.prompt_ids.empty(), "give exactly one of -p PROMPT and --prompt-ids IDS");
  HG_CHECK(o.prompt.empty() || !o.model_dir.empty(),
           "-p needs a tokenizer, and --random-weights has none: pass --prompt-ids 1,2,3 instead");
  HG_CHECK(o.max_new_tokens >= 0, "--max-new-tokens must be >= 0, got ", o.max_new_tokens);
  HG_CHECK(o.device == "cpu" || o.device == "cuda", "--device: expected cpu or cuda, got '", o.device, "'");
  if (!o.model_dir.empty()) {
    HG_CHECK(std::filesystem::is_directory(o.model_dir), "-m: '", o.model_dir, "' is not a directory");
  }
}

// The model on the chosen device behind one greedy call.
class Generator {
 public:
  Generator(const GenerateOptions& o, const ModelConfig& config) {
    const bool random = !o.random_preset.empty();
    if (o.device == "cuda") {
#ifdef HYDRAGEN_WITH_CUDA
      HG_CHECK(cuda::device_count() > 0, "--device cuda: no CUDA device found");
      gpu_ = std::make_unique<LlamaCuda>(
          config, random ? random_weights(config, o.seed, DType::bf16, Device::cuda)
                         : load_weights(config, Checkpoint(o.model_dir), DType::bf16));
#else
      fail("--device cuda: this build has no CUDA backend (configure with -DHYDRAGEN_CUDA=ON)");
#endif
    } else {
      cpu_ = std::make_unique<Llama>(config, random ? random_weights(config, o.seed)
                                                     : load_weights(config, Checkpoint(o.model_dir)));
    }
  }

  std::vector<std::int32_t> greedy(std::span<const std::int32_t> prompt, std::int64_t new_tokens,
                                   AttentionMode mode, const TokenCallback& on_token) const {
#ifdef HYDRAGEN_WITH_CUDA
    if (gpu_) return gpu_->greedy(prompt, new_tokens, mode, on_token);
#endif
    return hydragen::greedy(*cpu_, prompt, new_tokens, mode, on_token);
  }

 private:
  std::unique_ptr<Llama> cpu_;
#ifdef HYDRAGEN_WITH_CUDA
  std::unique_ptr<LlamaCuda> gpu_;
#endif
};

}  // namespace

std::vector<std::int32_t> run_generate(const GenerateOptions& o, std::FILE* out, std::FILE* log) {
  check_options(o);
  const AttentionMode mode = parse_mode(o.attention);
  const ModelConfig config = o.model_dir.empty() ? load_preset(o.random_preset) : load_model_config(o.model_dir);

  // The tokenizer: needed for -p; with --prompt-ids it only turns the output into text.
  std::unique_ptr<Tokenizer> tokenizer;
  if (!o.model_dir.empty() && (!o.prompt.empty() || has_tokenizer(o.model_dir))) {
    tokenizer = load_tokenizer(o.model_dir);
  }
  std::vector<std::int32_t> prompt;
  if (!o.prompt.empty()) {
    prompt = tokenizer->encode(o.prompt, true);
  } else {
    for (std::int64_t id : parse_count_list(o.prompt_ids, "--prompt-ids")) prompt.push_back(static_cast<std::int32_t>(id));
  }
  HG_CHECK(!prompt.empty(), "the prompt is empty after tokenization");
  for (std::int32_t id : prompt) {
    HG_CHECK(id >= 0 && id < config.vocab_size, "prompt token ", id, " is outside the vocabulary [0, ",
             config.vocab_size, ")");
  }

  const Generator generator(o, config);
  std::optional<StreamDecoder> stream;
  if (tokenizer) stream.emplace(*tokenizer);
  const auto on_token = [&](std::int32_t id) {
    if (stream) {
      std::fputs(stream->push(id).c_str(), out);
    } else {
      std::fprintf(out, "%d ", id);
    }
    std::fflush(out);
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::int32_t> generated = generator.greedy(prompt, o.max_new_tokens, mode, on_token);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (stream) std::fputs(stream->flush().c_str(), out);
  std::fputs("\n", out);
  std::fflush(out);
  std::fprintf(log, "generate: %zu tokens after a %zu-token prompt in %.3f s (%.1f tokens/s, prefill included), %s, %s attention\n",
               generated.size(), prompt.size(), seconds, seconds > 0 ? generated.size() / seconds : 0.0,
               o.device.c_str(), mode_name(mode));
  return generated;
}

void register_generate(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Greedy decoding of one prompt, streamed to stdout; tokens/s on stderr. A first step of the "
      "full generate (issue 5): sampling, batches, EOS stopping and CUDA graphs come later.");
  cmd->add_option("-m,--model", options->model_dir, "Hugging Face model directory (config.json, safetensors, tokenizer)");
  cmd->add_option("--random-weights", options->random_preset,
                  "Random weights of a preset instead of a checkpoint (tiny, codellama-7b, ...)");
  cmd->add_option("--seed", options->seed, "Seed of --random-weights")->capture_default_str();
  cmd->add_option("-p,--prompt", options->prompt, "Prompt text (needs the model's tokenizer)");
  cmd->add_option("--prompt-ids", options->prompt_ids,
                  "Prompt as comma-separated token ids (e.g. 1,2,3); without a tokenizer the output is ids too");
  cmd->add_option("--max-new-tokens", options->max_new_tokens, "Tokens to generate")->capture_default_str();
  cmd->add_option("--device", options->device, "cpu (fp32) or cuda (bf16)")->capture_default_str();
  cmd->add_option("--attention", options->attention, "hydragen, paged or dense")->capture_default_str();
  cmd->callback([options] { run_generate(*options, stdout, stderr); });
}

}  // namespace hydragen::cli
