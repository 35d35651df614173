// Engine: requests in, completions out. Prompts go into a radix tree over token ids (kv/),
// so any shared prefix structure becomes shared segments on its own; each segment is
// prefilled once, then every running sequence emits one token per decode step, attention
// reading the tree through the plan (attn/). See src/engine/README.md for who owns what.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/model_runner.h"
#include "kv/page_pool.h"
#include "kv/radix_tree.h"
#include "sample/sampling.h"

namespace hydragen::engine {

struct GenerationRequest {
  std::vector<std::int32_t> prompt;  // >= 1 token
  int n = 1;                         // samples; sample i uses seed sampling.seed + i
  sample::SamplingParams sampling;
  std::int64_t max_new_tokens = 128;
  std::vector<std::int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;  // needs EngineOptions::detokenize
  // An explicit sharing spec: prompt token counts where the tree must have a segment
  // boundary (e.g. after a system prompt, after a document), besides the automatic ones.
  std::vector<std::int64_t> segment_ends;
  // Read at most this many prompt tokens from the shared tree (-1: all); the rest of the
  // prompt is copied into the sequence's own pages: sharing limited to a root prefix, as
  // the paper's one-level baseline of its two-level experiment.
  std::int64_t max_shared_tokens = -1;
};

struct Completion {
  int request = 0, sample = 0;
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;     // log-probability of each token under the model
  std::string finish_reason;       // "stop" (a stop token or string), "length", or "error"
  std::string error;               // why a malformed request failed (it fails alone)
  bool kv_pool_full = false;       // failed only because the KV pool can never hold it at once
};

struct EngineOptions {
  AttentionChoice attention = AttentionChoice::hydragen;
  std::int64_t prefill_chunk_tokens = 2048;  // rows per prefill step
  std::int64_t max_running = 1024;           // sequences decoded together
  // Token ids -> text, for stop strings.
  std::function<std::string(std::span<const std::int32_t>)> detokenize;
  // Called with (completion index, token) as each token is sampled.
  std::function<void(std::size_t, std::int32_t)> on_token;
  // Called with a completion once it is final (finished, or failed with its error), so a
  // caller can write it out at once: a long run loses nothing already done.
  std::function<void(const Completion&)> on_finish;
  // Build the next decode step's attention plan while the device runs this one (used only
  // when the next step's layout turns out identical; off: every plan built in its own step).
  bool plan_ahead = true;
};

struct EngineStats {
  double prefill_seconds = 0, decode_seconds = 0;
  std::int64_t prefill_tokens = 0, decode_tokens = 0, decode_steps = 0;
  std::int64_t peak_kv_pages = 0, peak_running = 0;
  // At the step with the most context held: tokens whose K/V is stored (once) versus what
  // storing every sequence's whole context separately would take.
  std::int64_t stored_tokens = 0, per_sequence_tokens = 0;
  // Decode steps whose plan was built during the step before (EngineOptions::plan_ahead), and
  // plans built ahead that the next step could not use (its layout had changed).
  std::int64_t plans_built_ahead = 0, plans_ahead_discarded = 0;
};

class Engine {
 public:
  Engine(ModelRunner& runner, EngineOptions options);
  ~Engine();

  // Runs every request to completion; completions in request order, samples in order.
  std::vector<Completion> generate(std::span<const GenerationRequest> requests);

  // The step-level API that generate() is made of (benchmarks drive it directly).
  // submit: queues the request's samples; returns the index of its first completion.
  std::size_t submit(const GenerationRequest& request, int request_index);
  // Admits waiting sequences while pages last and prefills their new segments.
  // Returns how many sequences are running.
  std::int64_t admit_and_prefill();
  // One decode step over every running sequence; finished ones leave. False when idle.
  bool decode_step();
  // Admits and decodes until nothing waits or runs.
  void run();
  // Benchmarks: every running sequence gains `tokens` suffix tokens without computing them
  // (their K/V slots keep whatever the pool holds), to time a step at a later suffix length.
  void skip_suffix_tokens(std::int64_t tokens);
  std::int64_t running() const;
  std::int64_t waiting() const;
  const std::vector<Completion>& completions() const { return completions_; }
  const EngineStats& stats() const { return stats_; }
  const kv::PagePool& pool() const { return pool_; }

 private:
  struct Sequence;
  bool try_admit(Sequence& seq);
  std::int64_t shared_tokens_of(const GenerationRequest& request) const;
  void prefill(const std::vector<kv::NodeId>& nodes);
  void finish(Sequence& seq, const char* reason);
  bool hit_stop_string(const Sequence& seq) const;
  // The running sequences' layout `ahead` decode steps from now, if none leaves or joins.
  attn::PagedLayout decode_layout(int ahead = 0) const;
  // Whether every running sequence takes part in the next decode step as well (none finishes
  // by length in this one, each has pages for it): only then is a plan built ahead.
  bool all_continue_after_this_step() const;

  ModelRunner& runner_;
  EngineOptions options_;
  kv::PagePool pool_;
  std::unique_ptr<kv::RadixTree> tree_;
  std::deque<GenerationRequest> requests_;  // stable addresses: sequences point into it
  std::deque<std::unique_ptr<Sequence>> waiting_;  // admitted in submission order
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<Completion> completions_;
  EngineStats stats_;
  // The next decode step's plan and the layout it was built for (EngineOptions::plan_ahead).
  struct PlanAhead {
    attn::PagedLayout layout;
    attn::AttentionPlan plan;  // handed to the runner's prepare_plan when built
  };
  std::optional<PlanAhead> plan_ahead_;
};

}  // namespace hydragen::engine
