// Engine: requests in, completions out, as a long-lived service. Prompts go into a radix tree
// over token ids (kv/), so any shared prefix structure becomes shared segments on its own, and
// the tree outlives requests (a prefix cache). Each step runs every decoding sequence's next
// token and prefill chunks in what is left of a token budget (continuous batching: requests
// join and leave at step boundaries). See src/engine/README.md for who owns what.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/model_runner.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "kv/page_pool.h"
#include "kv/radix_tree.h"

namespace hydragen::engine {

struct EngineOptions {
  AttentionMode attention = AttentionMode::hydragen;  // none: attention skipped, projections kept
  // Rows one step may hold, decode rows included: every decoding sequence's next token, then
  // prefill chunks in what is left, so a long prompt arrives over several steps while the
  // others keep decoding. Capped at the runner's max_step_rows().
  std::int64_t max_step_tokens = 2048;
  std::int64_t max_running = 1024;  // sequences admitted at once (prefilling or decoding)
  // Token ids -> text, for stop strings.
  std::function<std::string(std::span<const std::int32_t>)> detokenize;
  // Called from inside step() for every token sampled (its time: when it reached the host), and
  // once per completion when it is final (finished, cancelled, or failed with its error).
  std::function<void(const TokenEvent&)> on_token;
  std::function<void(const Completion&)> on_finish;
  // Launch each step before collecting the one the device runs, its decode rows' input tokens
  // fed on the device (StepWork::fed_from), so the host's work between two steps (collecting,
  // scheduling, layout, plan, inputs) runs under the device's. A sequence that stops at a stop
  // token (which nobody can foresee) is computed once more and that row dropped. The same
  // tokens either way.
  bool overlap_steps = true;
};

// Timing and storage of what ran (benchmarks, `hydragen generate`'s summary).
struct EngineStats {
  // Wall time of steps without decode rows (prefill only), and of the others.
  double prefill_seconds = 0, decode_seconds = 0;
  std::int64_t prefill_tokens = 0, decode_tokens = 0, decode_steps = 0;
  std::int64_t mixed_steps = 0;  // steps holding decode rows and prefill chunks
  std::int64_t peak_kv_pages = 0, peak_running = 0;
  // At the step with the most context held: tokens whose K/V is stored (once) versus what
  // storing every sequence's whole context separately would take.
  std::int64_t stored_tokens = 0, per_sequence_tokens = 0;
  // Steps launched before the one before them was collected, and rows of such steps dropped
  // because their sequence had stopped or left the batch.
  std::int64_t overlapped_steps = 0, dropped_rows = 0;
};

// What a server exports: counters since the engine was made, and gauges of now.
struct EngineMetrics {
  std::int64_t requests = 0;  // submitted, malformed ones included
  // Completions (one per sample) by finish reason.
  std::int64_t finished_stop = 0, finished_length = 0, finished_cancelled = 0, finished_error = 0;
  std::int64_t prompt_tokens = 0;     // of the requests admitted to the queue, once per request
  std::int64_t generated_tokens = 0;  // handed to on_token
  // Per sequence admitted (a resumed one again): prompt tokens it needs from the tree, and of
  // those, found there with their K/V (not prefilled again).
  std::int64_t prefix_cache_query_tokens = 0, prefix_cache_hit_tokens = 0;
  std::int64_t preemptions = 0;
  std::int64_t running = 0, waiting = 0;  // sequences now (running: prefilling or decoding)
  // KV pages: all, in use, held only by the prefix cache (evictable), and read by tree segments
  // that two or more sequences hold.
  std::int64_t kv_pages = 0, kv_pages_used = 0, kv_pages_cached = 0, kv_pages_shared = 0;
};

class Engine {
 public:
  Engine(ModelRunner& runner, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request (any time between steps); it joins the batch at a step boundary. A
  // malformed one fails at once, alone: its completions carry "error" and why (on_finish).
  RequestId submit(GenerationRequest request);
  // Cancels every sample of a request (unknown or finished: nothing happens). At the next
  // step's start its waiting samples finish unstarted and its running ones finish "cancelled",
  // their own pages back in the pool.
  void cancel(RequestId request);
  // One scheduler iteration: admit what fits, build and launch one step (decode rows and
  // prefill chunks), collect the step before it (overlap_steps) or this one. False when
  // nothing waits, runs or is in flight.
  bool step();
  // Steps until idle.
  void run();
  // Submits every request and runs; completions in request order, samples in order.
  std::vector<Completion> generate(std::span<const GenerationRequest> requests);

  // Benchmarks and tests: admits what fits and runs prefill-only steps until every admitted
  // sequence is ready to decode; returns how many sequences are running.
  std::int64_t admit_and_prefill();
  // Benchmarks: every decoding sequence gains `tokens` suffix tokens without computing them
  // (their K/V slots keep whatever the pool holds), to time a step at a later suffix length.
  void skip_suffix_tokens(std::int64_t tokens);
  // Turns overlap_steps on or off (off: collects the step in flight first).
  void set_overlap_steps(bool on);
  void drain();  // collects every step in flight

  std::int64_t running() const { return scheduler_.admitted(); }
  std::int64_t waiting() const { return scheduler_.waiting(); }
  EngineMetrics metrics() const;
  const EngineStats& stats() const { return stats_; }
  const kv::PagePool& pool() const { return pool_; }

 private:
  struct RequestState {
    std::shared_ptr<const GenerationRequest> request;
    std::vector<Sequence*> live;     // by sample; null once finished
    std::vector<Completion> kept;    // generate(): the final completions, by sample
    int unfinished = 0;
    bool keep = false;
  };
  RequestId submit(GenerationRequest request, bool keep);
  void apply_cancellations();
  void launch(const ScheduledStep& work);
  // Collects the oldest step in flight: its tokens, stops and finishes. Whether it had decode rows.
  bool collect();
  void take_token(Sequence& seq, std::int32_t token, float logprob, std::span<const sample::TokenLogprob> top,
                  std::chrono::steady_clock::time_point time);
  bool hit_stop_string(const Sequence& seq) const;
  void finish(Sequence& seq, const char* reason, const std::string& error = {}, bool pool_full = false);
  void record(const Completion& c);  // metrics, on_finish, the request's bookkeeping

  ModelRunner& runner_;
  EngineOptions options_;
  kv::PagePool pool_;
  std::unique_ptr<kv::RadixTree> tree_;
  Scheduler scheduler_;
  std::unordered_map<RequestId, RequestState> requests_;  // not finished, or kept
  std::vector<RequestId> cancelled_;
  RequestId next_request_ = 0;
  std::uint64_t next_arrival_ = 0;
  // The steps launched and not collected, oldest first, with their decode rows' sequences.
  struct InFlight {
    std::vector<RowRef> rows;
  };
  std::deque<InFlight> in_flight_;
  EngineStats stats_;
  EngineMetrics counters_;  // the counters; metrics() adds the gauges
};

}  // namespace hydragen::engine
