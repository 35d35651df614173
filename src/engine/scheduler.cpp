#include "engine/scheduler.h"

#include <algorithm>
#include <span>
#include <unordered_set>

#include "hydragen/error.h"

namespace hydragen::engine {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

Scheduler::Scheduler(kv::PagePool& pool, kv::RadixTree& tree, SchedulerOptions options)
    : pool_(pool), tree_(tree), options_(options) {
  HG_CHECK(options_.max_running >= 1, "Scheduler: max_running must be >= 1, got ", options_.max_running);
  HG_CHECK(options_.max_step_tokens >= 1, "Scheduler: max_step_tokens must be >= 1, got ", options_.max_step_tokens);
}

void Scheduler::enqueue(std::unique_ptr<Sequence> seq) {
  seq->state = SequenceState::waiting;
  waiting_.push_back(std::move(seq));
}

std::int64_t Scheduler::decoding() const {
  return std::count_if(admitted_.begin(), admitted_.end(),
                       [](const auto& seq) { return seq->state == SequenceState::decoding; });
}

bool Scheduler::prefill_pending() const {
  return std::any_of(admitted_.begin(), admitted_.end(),
                     [](const auto& seq) { return seq->state == SequenceState::prefilling; });
}

ScheduledStep Scheduler::schedule(const std::vector<RowRef>* in_flight, bool decode) {
  ScheduledStep step;
  // Every decoding sequence's next row, oldest first (a preemption takes the newest).
  bool preempted = false;
  std::vector<Sequence*> rows;
  if (decode) {
    for (std::size_t i = 0; i < admitted_.size(); ++i) {
      Sequence& seq = *admitted_[i];
      if (seq.state == SequenceState::decoding && seq.rows_left() && grow(seq, preempted, step)) rows.push_back(&seq);
    }
  }
  // Those of the step in flight first, in its order: their tokens come from it.
  for (Sequence* seq : rows) seq->in_step = true;
  if (in_flight != nullptr) {
    for (std::size_t r = 0; r < in_flight->size(); ++r) {
      const RowRef& ref = (*in_flight)[r];
      if (ref.seq->epoch != ref.epoch || !ref.seq->in_step) continue;
      ref.seq->in_step = false;
      step.decode.push_back(ref.seq);
      step.fed_from.push_back(static_cast<std::int32_t>(r));
    }
  }
  for (Sequence* seq : rows) {
    if (!seq->in_step) continue;
    HG_CHECK(seq->in_flight == 0, "Scheduler: a sequence with a row in flight is not in the step launched last");
    seq->in_step = false;
    step.decode.push_back(seq);
  }

  // Prompt copies of the sequences whose tree path a launched step fills.
  for (auto& seq : admitted_)
    if (seq->state == SequenceState::prefilling && !seq->prompt_copied && seq->own_prompt() > 0 &&
        tree_path_filled(*seq, tree_))
      copy_unshared_prompt(*seq, tree_, step.copy_src, step.copy_dst);

  // A step that preempted admits nobody: the pages it freed go to those it keeps.
  if (!preempted) admit(decode, step);

  std::int64_t budget = options_.max_step_tokens - static_cast<std::int64_t>(step.decode.size());
  for (auto& seq : admitted_)
    if (seq->state == SequenceState::prefilling && take_prefill_chunks(*seq, tree_, budget, step.prefill))
      seq->state = SequenceState::decoding;  // from the next step on
  return step;
}

bool Scheduler::grow(Sequence& seq, bool& preempted, ScheduledStep& step) {
  const std::int64_t need =
      ceil_div(seq.own_prompt() + seq.next_row() + 1, pool_.page_size()) - static_cast<std::int64_t>(seq.pages.size());
  if (need <= 0) return true;
  while (true) {
    if (pool_.free_pages() >= need || tree_.make_room(need)) {
      const std::vector<std::int32_t> pages = std::move(*pool_.allocate(need));
      seq.pages.insert(seq.pages.end(), pages.begin(), pages.end());
      return true;
    }
    Sequence& victim = *admitted_.back();
    if (&victim == &seq && admitted_.size() == 1) {
      step.refused.push_back(&seq);  // alone in the pool and it does not fit
      return false;
    }
    preempt(victim);
    preempted = true;
    if (&victim == &seq) return false;
  }
}

void Scheduler::preempt(Sequence& seq) {
  pool_.release(seq.pages);
  seq.pages.clear();
  if (seq.leaf >= 0) tree_.unlock(tree_.path_to(seq.leaf));
  seq.leaf = -1;
  seq.epoch += 1;  // its rows in flight are dropped; its tokens so far are kept
  seq.in_flight = 0;
  seq.own_filled = 0;
  seq.prompt_copied = false;
  seq.state = SequenceState::waiting;
  waiting_.push_front(take(seq));
  ++preemptions_;
}

void Scheduler::admit(bool decode, ScheduledStep& step) {
  std::unordered_set<kv::NodeId> counted;
  std::int64_t backlog = 0;  // prefill tokens admitted and not yet scheduled
  for (const auto& seq : admitted_)
    if (seq->state == SequenceState::prefilling) backlog += prefill_backlog(*seq, tree_, counted);
  while (!waiting_.empty() && admitted() < options_.max_running &&
         backlog + static_cast<std::int64_t>(step.decode.size()) < options_.max_step_tokens) {
    Sequence& seq = *waiting_.front();
    if (!try_admit(seq)) {
      if (!admitted_.empty()) return;  // it waits for pages to come back
      step.refused.push_back(&seq);    // nothing else holds pages: it never fits
      retired_.push_back(take(seq));
      continue;
    }
    backlog += prefill_backlog(seq, tree_, counted);
    // A prompt found whole in the tree decodes at once.
    if (seq.own_prompt() == 0 && seq.generated() == 0 && tree_path_filled(seq, tree_)) {
      seq.prompt_copied = true;
      seq.state = SequenceState::decoding;
      if (decode) step.decode.push_back(&seq);
    }
    insert_admitted(take(seq));
  }
}

bool Scheduler::try_admit(Sequence& seq) {
  const std::span<const std::int32_t> prompt(seq.request->prompt);
  const auto tree_part = prompt.first(static_cast<std::size_t>(seq.tree_tokens));
  std::vector<kv::NodeId> path;
  std::int64_t hit = 0;
  if (seq.tree_tokens > 0) {
    hit = tree_.match(tree_part).tokens;
    // Boundaries the tree must have (pinned segment ends, where sharing ends): their prefixes first.
    std::vector<std::int64_t> boundaries = seq.request->segment_ends;
    boundaries.push_back(seq.shared_tokens);
    for (std::int64_t end : boundaries)
      if (end > 0 && end < seq.tree_tokens && !tree_.insert(prompt.first(static_cast<std::size_t>(end))))
        return false;
    auto inserted = tree_.insert(tree_part);
    if (!inserted) return false;
    path = std::move(*inserted);
    tree_.lock(path);
  }
  const std::int64_t pages = ceil_div(seq.own_target() + 1, pool_.page_size());
  auto allocated = pool_.allocate(pages);
  if (!allocated && tree_.make_room(pages)) allocated = pool_.allocate(pages);
  if (!allocated) {
    if (!path.empty()) tree_.unlock(path);
    return false;
  }
  seq.pages = std::move(*allocated);
  seq.leaf = path.empty() ? -1 : path.back();
  seq.own_filled = 0;
  seq.prompt_copied = false;
  seq.state = SequenceState::prefilling;
  prefix_query_tokens_ += seq.tree_tokens;
  prefix_hit_tokens_ += hit;
  return true;
}

void Scheduler::release(Sequence& seq) {
  pool_.release(seq.pages);
  seq.pages.clear();
  if (seq.leaf >= 0) tree_.unlock(tree_.path_to(seq.leaf));
  seq.leaf = -1;
  seq.epoch += 1;
  seq.in_flight = 0;
  seq.state = SequenceState::finished;
  if (std::unique_ptr<Sequence> owned = take(seq)) retired_.push_back(std::move(owned));
}

void Scheduler::collect_garbage() {
  std::erase_if(retired_, [](const std::unique_ptr<Sequence>& seq) { return seq->held == 0; });
}

std::unique_ptr<Sequence> Scheduler::take(Sequence& seq) {
  std::unique_ptr<Sequence> owned;
  auto same = [&](const std::unique_ptr<Sequence>& s) { return s.get() == &seq; };
  if (auto it = std::find_if(admitted_.begin(), admitted_.end(), same); it != admitted_.end()) {
    owned = std::move(*it);
    admitted_.erase(it);
  } else if (auto w = std::find_if(waiting_.begin(), waiting_.end(), same); w != waiting_.end()) {
    owned = std::move(*w);
    waiting_.erase(w);
  }
  return owned;
}

void Scheduler::insert_admitted(std::unique_ptr<Sequence> seq) {
  const auto at = std::upper_bound(admitted_.begin(), admitted_.end(), seq->arrival,
                                   [](std::uint64_t arrival, const auto& s) { return arrival < s->arrival; });
  admitted_.insert(at, std::move(seq));
}

}  // namespace hydragen::engine
