#include "bench_attention.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "cli_parse.h"
#include "hydragen/error.h"

namespace hydragen::bench {

namespace {

const std::set<std::string> kModes = {"hydragen", "hydragen-root", "paged", "dense"};

std::int64_t kv_token_bytes(const AttentionPoint& p, double element_bytes) {
  return static_cast<std::int64_t>(2 * p.kv_heads * p.head_dim * element_bytes);  // K and V
}

// Tokens of K/V a mode keeps in memory; for paged and dense also the tokens it reads.
double kv_tokens(const AttentionPoint& p, const std::string& mode, bool held) {
  const double b = static_cast<double>(p.batch);
  const double context = static_cast<double>(p.prefix + p.level2 + p.suffix);
  if (mode == "hydragen" || (mode == "paged" && held)) {
    return static_cast<double>(p.prefix + p.groups * p.level2) + b * p.suffix;
  }
  if (mode == "hydragen-root") return static_cast<double>(p.prefix) + b * (p.level2 + p.suffix);
  return b * context;  // paged reads, dense holds and reads: the whole context per sequence
}

// (Hq, Hkv, d) per shape from the paired --heads, --kv-heads, --head-dim lists.
std::vector<AttentionPoint> head_shapes(const BenchAttentionOptions& o) {
  const auto heads = cli::parse_count_list(o.heads, "--heads");
  const auto kv_heads = cli::parse_count_list(o.kv_heads, "--kv-heads");
  const auto head_dims = cli::parse_count_list(o.head_dim, "--head-dim");
  const std::size_t n = std::max({heads.size(), kv_heads.size(), head_dims.size()});
  auto pick = [n](const std::vector<std::int64_t>& list, const char* flag, std::size_t i) {
    HG_CHECK(list.size() == 1 || list.size() == n, flag, ": expected 1 or ", n,
             " values (paired with the other shape flags), got ", list.size());
    return list.size() == 1 ? list[0] : list[i];
  };
  std::vector<AttentionPoint> shapes(n);
  for (std::size_t i = 0; i < n; ++i) {
    AttentionPoint& p = shapes[i];
    p.heads = pick(heads, "--heads", i);
    p.kv_heads = pick(kv_heads, "--kv-heads", i);
    p.head_dim = pick(head_dims, "--head-dim", i);
    HG_CHECK(p.heads >= 1 && p.kv_heads >= 1 && p.heads % p.kv_heads == 0,
             "--heads must be a positive multiple of --kv-heads, got --heads ", p.heads,
             " --kv-heads ", p.kv_heads);
    HG_CHECK(p.head_dim >= 1, "--head-dim must be positive, got ", p.head_dim);
  }
  return shapes;
}

std::vector<AttentionPoint> sweep_points(const BenchAttentionOptions& o) {
  const auto batches = cli::parse_count_list(o.batch, "--batch");
  const auto prefixes = cli::parse_count_list(o.prefix, "--prefix");
  const auto suffixes = cli::parse_count_list(o.suffix, "--suffix");
  cli::TwoLevelShape two_level;
  if (!o.two_level.empty()) two_level = cli::parse_two_level(o.two_level, "--two-level");
  HG_CHECK(o.query_tokens >= 1, "--query-tokens must be at least 1, got ", o.query_tokens);
  std::vector<AttentionPoint> points;
  for (const AttentionPoint& shape : head_shapes(o)) {
    for (std::int64_t suffix : suffixes) {
      HG_CHECK(suffix >= o.query_tokens, "--suffix: every suffix must hold the ", o.query_tokens,
               " query tokens (--query-tokens), got ", suffix);
      for (std::int64_t prefix : prefixes) {
        for (std::int64_t batch : batches) {
          HG_CHECK(batch >= 1, "--batch: every batch must be at least 1, got ", batch);
          HG_CHECK(two_level.groups == 0 || batch % two_level.groups == 0, "--batch: ", batch,
                   " is not a multiple of the ", two_level.groups, " groups of --two-level");
          AttentionPoint p = shape;
          p.batch = batch;
          p.prefix = prefix;
          p.suffix = suffix;
          p.query_tokens = o.query_tokens;
          p.groups = two_level.groups;
          p.level2 = two_level.level2_tokens;
          points.push_back(p);
        }
      }
    }
  }
  return points;
}

std::vector<std::string> checked_modes(const BenchAttentionOptions& o) {
  std::vector<std::string> modes = cli::parse_word_list(o.modes, "--modes");
  for (const std::string& mode : modes) {
    HG_CHECK(kModes.count(mode), "--modes: unknown mode '", mode,
             "', expected hydragen, hydragen-root, paged or dense");
    HG_CHECK(mode != "hydragen-root" || !o.two_level.empty(),
             "--modes: hydragen-root (share only the root) needs --two-level GROUPS:LEVEL2");
  }
  return modes;
}

void print_ceilings(const Ceilings& c, const DisplayUnits& units) {
  std::printf("device: %s\n", c.device.c_str());
  std::printf("peak compute: %.2f %s (%s)\n", c.peak_flops_per_s / units.rate_scale,
              units.flops_label, c.peak_flops_source.c_str());
  std::printf("bandwidth:    %.2f %s (%s)\n\n", c.bandwidth_bytes_per_s / units.rate_scale,
              units.bytes_label, c.bandwidth_source.c_str());
}

}  // namespace

double attention_useful_flops(const AttentionPoint& p) {
  const double t = static_cast<double>(p.query_tokens);
  const double context = static_cast<double>(p.prefix + p.level2 + p.suffix);
  const double keys_per_sequence = t * context - t * (t - 1) / 2;  // causal among the T queries
  return 4.0 * p.heads * p.head_dim * keys_per_sequence * p.batch;
}

double attention_min_bytes(const AttentionPoint& p, const std::string& mode, double element_bytes) {
  const double rows = static_cast<double>(p.batch * p.query_tokens);
  const double q_bytes = rows * p.heads * p.head_dim * element_bytes;
  const double o_bytes = rows * p.heads * (p.head_dim + 1) * 4.0;  // f32 o and lse
  return kv_tokens(p, mode, false) * kv_token_bytes(p, element_bytes) + q_bytes + o_bytes;
}

double attention_kv_bytes_held(const AttentionPoint& p, const std::string& mode,
                               double element_bytes) {
  return kv_tokens(p, mode, true) * kv_token_bytes(p, element_bytes);
}

void run_bench_attention(const BenchAttentionOptions& options) {
  HG_CHECK(options.device == "cpu" || options.device == "cuda",
           "--device: expected cpu or cuda, got '", options.device, "'");
  const std::vector<std::string> modes = checked_modes(options);
  const std::vector<AttentionPoint> points = sweep_points(options);
  std::unique_ptr<AttentionBench> backend = options.device == "cpu"
                                                ? make_cpu_attention_bench(options)
                                                : make_cuda_attention_bench(options);
  const Ceilings ceilings = backend->ceilings();
  print_ceilings(ceilings, backend->units());
  nlohmann::json settings = backend->settings();
  settings["modes"] = modes;
  settings["repeats"] = options.repeats;
  settings["warmup"] = options.warmup;

  const TablePrinter printer(backend->units(), ceilings, backend->reports_shared_ms());
  printer.print_header();
  std::vector<AttentionRow> all_rows;
  for (const AttentionPoint& point : points) {
    std::vector<AttentionRow> rows = backend->measure(point, modes);
    finish_point(rows);
    printer.print_rows(rows);
    all_rows.insert(all_rows.end(), rows.begin(), rows.end());
    // Rewritten after every point so a long sweep that is stopped keeps what it measured.
    if (!options.json_path.empty()) {
      write_json_file(options.json_path, report_json(ceilings, settings, all_rows));
    }
  }
  if (!options.json_path.empty()) std::printf("\nwrote %s\n", options.json_path.c_str());
}

void register_bench_attention(CLI::App& bench) {
  auto options = std::make_shared<BenchAttentionOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "attention",
      "Time attention over B sequences sharing a prefix: hydragen (shared prefix attended once "
      "by all stacked queries) vs paged (prefix stored once, read per sequence) vs dense (a "
      "copy per sequence). Prints a table and writes JSON.");
  cmd->add_option("--device", options->device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--batch", options->batch, "Sequences, comma-separated list")->capture_default_str();
  cmd->add_option("--prefix", options->prefix, "Shared prefix tokens, list; K = 1024")
      ->capture_default_str();
  cmd->add_option("--suffix", options->suffix, "Own suffix tokens per sequence, list")
      ->capture_default_str();
  cmd->add_option("--heads", options->heads, "Query heads Hq (list: one per shape)")->capture_default_str();
  cmd->add_option("--kv-heads", options->kv_heads, "K/V heads Hkv, Hq a multiple of it (list: paired with --heads)")
      ->capture_default_str();
  cmd->add_option("--head-dim", options->head_dim, "Head dimension d (list: paired with --heads)")->capture_default_str();
  cmd->add_option("--modes", options->modes,
                  "hydragen, paged, dense; hydragen-root (only with --two-level)")
      ->capture_default_str();
  cmd->add_option("--json", options->json_path, "Write every row, the ceilings and the device here");
  cmd->add_option("--query-tokens", options->query_tokens, "Query tokens per sequence (causal)")
      ->capture_default_str();
  cmd->add_option("--repeats", options->repeats, "Timed runs per mode (median reported)")
      ->capture_default_str();
  cmd->add_option("--warmup", options->warmup, "Untimed runs first")->capture_default_str();
  cmd->add_option("--point-seconds", options->point_seconds,
                  "CPU: fewer repeats (at least 3) when one mode of a point would take longer")
      ->capture_default_str();
  cmd->add_option("--dtype", options->dtype, "cpu: f32|bf16|fp16 (auto: f32); cuda: bf16|fp16")
      ->capture_default_str();
  cmd->add_option("--page-size", options->page_size, "cuda: K/V page size in tokens (16 or 64)")
      ->capture_default_str();
  cmd->add_option("--memory-budget-gb", options->memory_budget_gb,
                  "cpu: skip a mode whose K/V exceeds this (X, out of memory); 0: 75% of RAM")
      ->capture_default_str();
  cmd->add_option("--two-level", options->two_level,
                  "GROUPS:LEVEL2: root prefix -> GROUPS nodes of LEVEL2 tokens -> batch/GROUPS "
                  "sequences each (e.g. 64:2K)");
  cmd->add_option("--seed", options->seed, "Random data seed")->capture_default_str();
  cmd->footer(
      "\nExamples:\n"
      "  hydragen bench attention --batch 16,64,256 --prefix 1K,4K,16K --suffix 1,64 \\\n"
      "      --heads 32,8 --kv-heads 8,1 --head-dim 128 --json cpu.json\n"
      "  hydragen bench attention --device cuda --heads 8 --kv-heads 1 --batch 1024 "
      "--prefix 32K\n"
      "  hydragen bench attention --device cuda --two-level 64:2K --prefix 8K --suffix 64 "
      "--batch 1024 --modes hydragen,hydragen-root,paged\n");
  cmd->callback([options] { run_bench_attention(*options); });
}

}  // namespace hydragen::bench
