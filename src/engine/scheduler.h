// Scheduler: who runs in the next step, and which pages they hold.
// - Admission: first come, first served, while fewer than max_running sequences are admitted,
//   the pages can be had (cached prefixes evicted LRU first) and the prefill already admitted
//   does not fill the step's token budget.
// - Pages on demand: a sequence holds pages for its prompt share, the tokens it has and the
//   step's new slot; it takes another page as it grows.
// - Preemption: when a decoding sequence's next page cannot be had, the newest admitted
//   sequences give their own pages back (their tree segments stay, unlocked: cache) and go
//   back to the head of the queue; resumed, they recompute what they had (prefill.h).
// - A step: every decoding sequence's next row (those in the step in flight first, in its
//   order, fed from it on the device), then prefill chunks, oldest sequence first, in what is
//   left of max_step_tokens.
// It owns the sequences; the engine finishes them (release) and counts their rows in flight.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_builder.h"
#include "kv/page_pool.h"
#include "kv/radix_tree.h"

namespace hydragen::engine {

struct SchedulerOptions {
  std::int64_t max_running = 1024;     // sequences admitted (prefilling or decoding)
  std::int64_t max_step_tokens = 2048;  // rows per step, decode rows included
};

// A row of a step in flight, and the epoch of its sequence when launched.
struct RowRef {
  Sequence* seq = nullptr;
  std::uint32_t epoch = 0;
};

class Scheduler {
 public:
  Scheduler(kv::PagePool& pool, kv::RadixTree& tree, SchedulerOptions options);

  // Queues a new sequence last.
  void enqueue(std::unique_ptr<Sequence> seq);
  // The next step. in_flight: the rows of the step launched last while it is not collected
  // (its decode rows are fed from it). decode false: prefill only.
  ScheduledStep schedule(const std::vector<RowRef>* in_flight, bool decode);
  // Its pages and tree path go back, it leaves every list; kept until no row in flight holds it.
  void release(Sequence& seq);
  // Frees finished sequences that no row in flight holds.
  void collect_garbage();

  // Sequences by state (for cancellation and benchmarks).
  template <class F>
  void for_each_live(F&& f) {
    for (auto& seq : waiting_) f(*seq);
    for (auto& seq : admitted_) f(*seq);
  }
  std::int64_t waiting() const { return static_cast<std::int64_t>(waiting_.size()); }
  std::int64_t admitted() const { return static_cast<std::int64_t>(admitted_.size()); }
  std::int64_t decoding() const;
  bool idle() const { return waiting_.empty() && admitted_.empty(); }
  bool prefill_pending() const;  // an admitted sequence has prefill left
  std::int64_t preemptions() const { return preemptions_; }
  // Prompt tokens looked up in the tree at admission (tree part), and found there filled.
  std::int64_t prefix_query_tokens() const { return prefix_query_tokens_; }
  std::int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }

 private:
  bool try_admit(Sequence& seq);
  // Pages for seq's next decode row; preempts the newest admitted sequences while the pool is
  // short. False when seq itself was preempted or refused.
  bool grow(Sequence& seq, bool& preempted, ScheduledStep& step);
  void preempt(Sequence& seq);
  void admit(bool decode, ScheduledStep& step);
  std::unique_ptr<Sequence> take(Sequence& seq);  // out of waiting_ or admitted_
  void insert_admitted(std::unique_ptr<Sequence> seq);

  kv::PagePool& pool_;
  kv::RadixTree& tree_;
  SchedulerOptions options_;
  std::deque<std::unique_ptr<Sequence>> waiting_;    // admitted front first
  std::vector<std::unique_ptr<Sequence>> admitted_;  // by arrival
  std::vector<std::unique_ptr<Sequence>> retired_;   // finished, a row in flight may hold them
  std::int64_t preemptions_ = 0, prefix_query_tokens_ = 0, prefix_hit_tokens_ = 0;
};

}  // namespace hydragen::engine
