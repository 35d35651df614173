// Engine: requests in, completions out. Prompts go into a radix tree over token ids (kv/),
// so any shared prefix structure becomes shared segments on its own; each segment is
// prefilled once, then every running sequence emits one token per decode step, attention
// reading the tree through the plan (plan/). See src/engine/README.md for who owns what.
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
  AttentionMode attention = AttentionMode::hydragen;  // none: attention skipped, projections kept
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
  // Only without overlap_steps, which builds every plan while the step before runs.
  bool plan_ahead = true;
  // Launch the next decode step before collecting the one the device is running, its input
  // tokens fed on the device (ModelRunner::launch_decode), so that the host's work between two
  // steps (bookkeeping, the next layout, plan and inputs, the launch) runs under the device's
  // and the device never waits for it. Only while the batch stays the same and every sequence
  // has a next token to make: a sequence that stops at a stop token (which no one can foresee)
  // is computed once more and that row dropped; a join, or a finish by length, runs the next
  // step after the last is collected. The same tokens either way.
  bool overlap_steps = true;
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
  // Decode steps launched before the step before them was collected (EngineOptions::
  // overlap_steps), and rows of such steps dropped because their sequence had stopped.
  std::int64_t overlapped_steps = 0, dropped_rows = 0;
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
  // One decode step over every running sequence; finished ones leave. False when idle. With
  // overlap_steps: collects one step (launching it first if none is in flight), and launches
  // the next one before that when it can follow.
  bool decode_step();
  // Collects every decode step in flight (overlap_steps).
  void drain();
  // Turns overlap_steps on or off (off: drains first).
  void set_overlap_steps(bool on);
  // Admits and decodes until nothing waits or runs.
  void run();
  // Benchmarks: every running sequence gains `tokens` suffix tokens without computing them
  // (their K/V slots keep whatever the pool holds), to time a step at a later suffix length.
  // Drains first.
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
  // Whether finish() ran for it (its completion has a finish reason; its pages went back, and a
  // step in flight may still hold its row).
  bool finished(const Sequence& seq) const;
  bool hit_stop_string(const Sequence& seq) const;
  // The running sequences' layout `ahead` decode steps from now, if none leaves or joins.
  plan::PagedLayout decode_layout(int ahead = 0) const;
  // Whether every running sequence takes part in the next decode step as well (none finishes
  // by length in this one, each has pages for it): only then is a plan built ahead, or
  // (overlap_steps) the next step launched before this one is collected.
  bool all_continue_after_this_step() const;
  // decode_step without overlap_steps: build (or take the plan built ahead), run, collect.
  bool decode_step_in_place();
  // The rows and sampling of a decode step of every running sequence, each `ahead` steps past
  // the tokens it holds (`layout`: decode_layout(ahead)); records the step's stored and
  // per-sequence tokens.
  void decode_inputs(const plan::PagedLayout& layout, int ahead, StepRows& rows, StepSampling& sampling);
  // overlap_steps: launch a decode step of every running sequence, each `ahead` steps past
  // the tokens it has (0, or 1 with the step before still in flight: its tokens come from it).
  void launch_decode(int ahead);
  // ... and collect the oldest step in flight: its tokens, stops and finishes.
  void collect_decode();
  // Whether the next step can be launched before the one in flight is collected: the batch
  // is the one in flight and every sequence has a token to make after it.
  bool next_step_can_follow() const;
  // The completion bookkeeping of one sampled token; false when the sequence finished.
  bool take_token(Sequence& seq, std::int32_t token, float logprob);

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
    plan::PagedLayout layout;
    plan::AttentionPlan plan;  // handed to the runner's prepare_plan when built
  };
  std::optional<PlanAhead> plan_ahead_;
  // overlap_steps: the steps launched and not yet collected, oldest first, with their rows'
  // sequences (a sequence that finished stays alive in retired_ until no step holds it).
  struct InFlight {
    std::vector<Sequence*> rows;
    std::uint64_t batch = 0;  // batch_ when launched
  };
  std::deque<InFlight> in_flight_;
  std::uint64_t batch_ = 0;  // changes whenever a sequence joins or leaves running_
  std::vector<std::unique_ptr<Sequence>> retired_;
};

}  // namespace hydragen::engine
