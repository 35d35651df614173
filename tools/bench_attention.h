// `hydragen bench attention`: the attention microbenchmark of the paper (Fig. 5) on the CPU
// or a CUDA device. One sweep driver; a backend measures every mode of one point.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_report.h"

namespace hydragen::bench {

struct BenchAttentionOptions {
  std::string device = "cpu";
  std::string batch = "16,64,256";
  std::string prefix = "4K";
  std::string suffix = "1";
  // Shapes: lists paired element by element (a single value serves every shape), so
  // --heads 32,8 --kv-heads 8,1 sweeps Hq=32/Hkv=8 and Hq=8/Hkv=1.
  std::string heads = "32";
  std::string kv_heads = "8";
  std::string head_dim = "128";
  std::string modes = "hydragen,paged,dense";
  std::string json_path;
  std::int64_t query_tokens = 1;
  int repeats = 10;
  int warmup = 1;
  double point_seconds = 10;  // the CPU trims repeats so one mode of one point stays under it
  std::string dtype = "auto";  // cpu: f32 (bf16, fp16 computed in f32); cuda: bf16 | fp16
  int page_size = 64;
  double memory_budget_gb = 0;  // 0: 75% of physical memory (CPU)
  std::string two_level;        // "GROUPS:LEVEL2", empty for one level
  std::uint64_t seed = 1234;
};

// Measures every requested mode of one point. Implemented per device.
class AttentionBench {
 public:
  virtual ~AttentionBench() = default;
  virtual Ceilings ceilings() = 0;  // measured once, in the same run as the points
  virtual DisplayUnits units() const = 0;
  virtual bool reports_shared_ms() const = 0;
  virtual nlohmann::json settings() const = 0;  // device-specific settings for the JSON
  virtual std::vector<AttentionRow> measure(const AttentionPoint& point,
                                            const std::vector<std::string>& modes) = 0;
};

std::unique_ptr<AttentionBench> make_cpu_attention_bench(const BenchAttentionOptions& options);
// Throws hydragen::Error when this build has no CUDA backend or no usable device.
std::unique_ptr<AttentionBench> make_cuda_attention_bench(const BenchAttentionOptions& options);

// Useful FLOPs and the bytes a mode must move, for backends that do not report their own.
// Same FLOPs for every mode: 4·Hq·d per (query row, key) pair, causal among query tokens.
double attention_useful_flops(const AttentionPoint& point);
// K/V read once per reader (segment once for hydragen, whole context per sequence for
// paged/dense) + Q read + O (f32) and lse written.
double attention_min_bytes(const AttentionPoint& point, const std::string& mode,
                           double element_bytes);
// K/V memory the mode holds: dense keeps a copy of the context per sequence.
double attention_kv_bytes_held(const AttentionPoint& point, const std::string& mode,
                               double element_bytes);

// Adds the `attention` subcommand under `bench`.
void register_bench_attention(CLI::App& bench);
// `hydragen bench e2e` (tools/bench_e2e.cpp).
void register_bench_e2e(CLI::App& bench);
// `hydragen bench host` (tools/bench_host.cpp): the engine's host work per decode step.
void register_bench_host(CLI::App& bench);
void run_bench_attention(const BenchAttentionOptions& options);

}  // namespace hydragen::bench
