#include "model_flags.h"

#include "cli_parse.h"
#include "device_choice.h"
#include "hydragen/error.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace hydragen::cli {

void add_model_source_flags(CLI::App& cmd, ModelFlags& o) {
  ModelFlags* p = &o;
  cmd.add_option("-m,--model", o.model_dir, "Hugging Face model directory (config.json, safetensors, tokenizer)");
  cmd.add_option("--random-weights", o.random_preset,
                 "Random weights of a preset instead of a checkpoint (tiny, codellama-7b, ...)");
  cmd.add_option_function<std::string>(
         "--weights-seed", [p](const std::string& t) { p->weights_seed = parse_unsigned(t, "--weights-seed"); },
         "Seed of --random-weights")
      ->type_name("N")
      ->default_str("0");
}

void add_engine_flags(CLI::App& cmd, ModelFlags& o, const std::string& kv_memory_help) {
  ModelFlags* p = &o;
  cmd.add_option("--device", o.device, kDeviceHelp)->capture_default_str();
  cmd.add_option("--attention", o.attention, "hydragen, paged, dense or none")->capture_default_str();
  cmd.add_option_function<std::string>(
         "--page-size",
         [p](const std::string& t) { p->page_size = static_cast<int>(parse_integer(t, "--page-size", 1, 128)); },
         "KV page size in tokens: 16, 32, 64 or 128")
      ->type_name("N")
      ->default_str("64");
  cmd.add_option_function<std::string>(
         "--kv-memory", [p](const std::string& t) { p->kv_memory_bytes = parse_bytes(t, "--kv-memory"); },
         kv_memory_help)
      ->type_name("SIZE");
  cmd.add_option_function<std::string>(
         "--max-batch", [p](const std::string& t) { p->max_batch = parse_integer(t, "--max-batch", 1, INT32_MAX); },
         "Most sequences decoded together")
      ->type_name("N")
      ->default_str("1024");
  cmd.add_flag("!--no-cuda-graphs", o.cuda_graphs, "Launch every kernel of a decode step (no CUDA graphs)");
}

void check_model_flags(const ModelFlags& o) {
  if (o.model_dir.empty() == o.random_preset.empty())
    usage_error("give exactly one of -m MODEL_DIR and --random-weights PRESET");
  if (o.page_size != 16 && o.page_size != 32 && o.page_size != 64 && o.page_size != 128)
    usage_error("--page-size: expected 16, 32, 64 or 128, got ", o.page_size);
  try {
    parse_mode(o.attention);
  } catch (const Error& e) {
    usage_error("--attention: ", e.what());
  }
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    usage_error("--device: expected auto, cpu or cuda, got '", o.device, "'");
}

std::unique_ptr<engine::ModelRunner> make_model_runner(const ModelFlags& o, const std::string& device,
                                                       const ModelConfig& config,
                                                       const engine::RunnerOptions& runner_options) {
  const bool random = !o.random_preset.empty();
  if (device == "cuda")
    return engine::make_cuda_runner(config,
                                    random ? random_weights(config, o.weights_seed, DType::bf16, Device::cuda)
                                           : load_weights(config, Checkpoint(o.model_dir), DType::bf16),
                                    runner_options);
  return engine::make_cpu_runner(
      config, random ? random_weights(config, o.weights_seed) : load_weights(config, Checkpoint(o.model_dir)),
      runner_options);
}

engine::RunnerOptions runner_options_of(const ModelFlags& o) {
  engine::RunnerOptions r;
  r.page_size = o.page_size;
  r.kv_memory_bytes = o.kv_memory_bytes;
  r.max_batch = o.max_batch;
  r.cuda_graphs = o.cuda_graphs;
  return r;
}

}  // namespace hydragen::cli
