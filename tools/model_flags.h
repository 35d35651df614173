// The flags that choose a model and how the engine runs it, shared by `hydragen generate` and
// `hydragen serve`: -m | --random-weights, --device, --attention, the KV pool and the batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "engine/model_runner.h"
#include "model/model_config.h"

namespace hydragen::cli {

struct ModelFlags {
  std::string model_dir;       // -m: config.json + safetensors (+ tokenizer)
  std::string random_preset;   // --random-weights PRESET instead of a checkpoint
  std::uint64_t weights_seed = 0;
  std::string device = "auto";
  std::string attention = "hydragen";
  int page_size = 64;
  std::int64_t kv_memory_bytes = 0;  // 0: sized to the work (CPU), the free memory after weights (CUDA)
  std::int64_t max_batch = 1024;
  bool cuda_graphs = true;
};

// -m, --random-weights, --weights-seed (first), and the engine's flags (add_engine_flags).
void add_model_source_flags(CLI::App& cmd, ModelFlags& o);
void add_engine_flags(CLI::App& cmd, ModelFlags& o, const std::string& kv_memory_help);

// One model source, the page size, --attention and --device names: a UsageError naming the flag.
void check_model_flags(const ModelFlags& o);

// The runner for the loaded config on `device` ("cpu" or "cuda"): random weights of the
// preset or the checkpoint's, bf16 on CUDA and f32 on the CPU.
std::unique_ptr<engine::ModelRunner> make_model_runner(const ModelFlags& o, const std::string& device,
                                                       const ModelConfig& config,
                                                       const engine::RunnerOptions& runner_options);

// RunnerOptions from the flags (pages left to kv_memory_bytes or the runner's default).
engine::RunnerOptions runner_options_of(const ModelFlags& o);

}  // namespace hydragen::cli
