#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "hydragen/error.h"

namespace hydragen::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::int32_t slot_of(const std::vector<std::int32_t>& pages, int first_slot, std::int64_t index, int page_size) {
  const std::int64_t at = first_slot + index;
  return static_cast<std::int32_t>(pages[static_cast<std::size_t>(at / page_size)] * page_size + at % page_size);
}

// A step's PagedLayout under construction: tree nodes become segments on first use, their
// ancestors before them.
class LayoutBuilder {
 public:
  LayoutBuilder(const kv::RadixTree& tree, const ModelConfig& config, int page_size) : tree_(tree) {
    layout.page_size = page_size;
    layout.kv_heads = static_cast<int>(config.num_kv_heads);
    layout.q_heads = static_cast<int>(config.num_heads);
    layout.head_dim = static_cast<int>(config.head_dim);
  }
  // The segment index of node `id` (kNoParent for the root or no node).
  int segment(kv::NodeId id) {
    if (id == kv::kRoot || id < 0) return kNoParent;
    if (auto it = segment_of_.find(id); it != segment_of_.end()) return it->second;
    const kv::RadixNode& node = tree_.node(id);
    plan::PagedLayout::SegmentPages seg;
    seg.parent = segment(node.parent);
    seg.tokens = static_cast<std::int64_t>(node.tokens.size());
    seg.pages = node.pages;
    seg.first_slot = node.first_slot;
    layout.segments.push_back(std::move(seg));
    return segment_of_[id] = static_cast<int>(layout.segments.size()) - 1;
  }
  plan::PagedLayout layout;

 private:
  const kv::RadixTree& tree_;
  std::unordered_map<kv::NodeId, int> segment_of_;
};

}  // namespace

// One generation stream. Its prompt's first len-1 tokens live in the tree (shared with every
// prompt that starts the same way); the last prompt token is its first decode input, so a
// fully cached prompt still yields the logits of its next token. Its own pages hold that
// token and what it generates. A sequence reads only the first `shared_tokens` of its prompt
// from the tree; the rest is copied into its own pages after prefill (dense: shared_tokens =
// 0, the whole prompt; GenerationRequest::max_shared_tokens: one-level sharing).
struct Engine::Sequence {
  std::size_t completion = 0;
  const GenerationRequest* request = nullptr;
  sample::SamplingParams params;
  kv::NodeId leaf = -1;  // the tree node holding prompt[len-2]; -1: reads no tree segment
  std::int64_t tree_tokens = 0;    // prompt tokens in the tree: all but the last
  std::int64_t shared_tokens = 0;  // of those, read from the tree; the rest are copied

  std::vector<std::int32_t> pages;
  std::int64_t own_tokens = 0;  // tokens whose K/V is in `pages`
  std::int32_t next_token = 0;
  int in_flight = 0;  // decode steps launched with it and not yet collected (overlap_steps)
  sample::HeldTokens held;  // its tokens counted for the penalties (decode_inputs)

  std::int64_t context() const { return (leaf >= 0 ? shared_tokens : 0) + own_tokens; }
};

Engine::Engine(ModelRunner& runner, EngineOptions options)
    : runner_(runner), options_(std::move(options)), pool_(runner.kv_pages(), runner.page_size()),
      tree_(std::make_unique<kv::RadixTree>(pool_)) {
  HG_CHECK(options_.prefill_chunk_tokens >= 1, "Engine: prefill_chunk_tokens must be >= 1");
  options_.prefill_chunk_tokens = std::min(options_.prefill_chunk_tokens, runner_.max_step_rows());
  HG_CHECK(options_.max_running >= 1, "Engine: max_running must be >= 1");
  options_.max_running = std::min(options_.max_running, runner_.max_step_rows());
}

Engine::~Engine() {
  try {
    drain();  // nothing in flight refers to the sequences or buffers about to go
  } catch (...) {
  }
}

std::int64_t Engine::running() const { return static_cast<std::int64_t>(running_.size()); }
std::int64_t Engine::waiting() const { return static_cast<std::int64_t>(waiting_.size()); }

std::size_t Engine::submit(const GenerationRequest& request, int request_index) {
  const std::size_t first = completions_.size();
  std::string error;
  try {
    const ModelConfig& config = runner_.config();
    HG_CHECK(!request.prompt.empty(), "the prompt is empty");
    for (std::size_t i = 0; i < request.prompt.size(); ++i)
      HG_CHECK(request.prompt[i] >= 0 && request.prompt[i] < config.vocab_size, "prompt token ", i, " (",
               request.prompt[i], ") is outside the vocabulary [0, ", config.vocab_size, ")");
    HG_CHECK(request.n >= 1 && request.n <= 1 << 20, "n must be in [1, 1048576], got ", request.n);
    HG_CHECK(request.max_new_tokens >= 1, "max_new_tokens must be >= 1, got ", request.max_new_tokens);
    sample::validate(request.sampling);
    HG_CHECK(request.stop_strings.empty() || options_.detokenize, "stop strings need a tokenizer");
    for (std::int64_t end : request.segment_ends)
      HG_CHECK(end > 0 && end <= static_cast<std::int64_t>(request.prompt.size()), "segment end ", end,
               " is outside the prompt's ", request.prompt.size(), " tokens");
    const auto prompt = static_cast<std::int64_t>(request.prompt.size());
    HG_CHECK(config.max_position_embeddings <= 0 || prompt + request.max_new_tokens <= config.max_position_embeddings,
             "the prompt (", prompt, " tokens) and max_new_tokens (", request.max_new_tokens,
             ") pass the model's context of ", config.max_position_embeddings, " positions");
    const std::int64_t own = prompt - 1 - shared_tokens_of(request) + request.max_new_tokens;
    const std::int64_t pages = ceil_div(prompt - 1, pool_.page_size()) + ceil_div(own, pool_.page_size());
    HG_CHECK(pages <= pool_.num_pages(), "the prompt (", prompt, " tokens) and max_new_tokens (",
             request.max_new_tokens, ") need ", pages, " KV pages, the pool has ", pool_.num_pages());
  } catch (const Error& e) {
    error = e.what();
  }
  requests_.push_back(request);
  const GenerationRequest& stored = requests_.back();
  for (int i = 0; i < std::max(1, request.n); ++i) {
    Completion c;
    c.request = request_index;
    c.sample = i;
    if (!error.empty()) {
      c.finish_reason = "error";
      c.error = error;
    }
    completions_.push_back(std::move(c));
    if (!error.empty()) {
      if (options_.on_finish) options_.on_finish(completions_.back());
      continue;
    }
    auto seq = std::make_unique<Sequence>();
    seq->completion = completions_.size() - 1;
    seq->request = &stored;
    seq->params = stored.sampling;
    seq->params.seed = stored.sampling.seed + static_cast<std::uint64_t>(i);
    seq->tree_tokens = static_cast<std::int64_t>(stored.prompt.size()) - 1;
    seq->shared_tokens = shared_tokens_of(stored);
    seq->next_token = stored.prompt.back();
    waiting_.push_back(std::move(seq));
  }
  return first;
}

std::int64_t Engine::shared_tokens_of(const GenerationRequest& request) const {
  const auto tree_tokens = static_cast<std::int64_t>(request.prompt.size()) - 1;
  if (options_.attention == AttentionMode::dense) return 0;
  return request.max_shared_tokens < 0 ? tree_tokens : std::min(tree_tokens, request.max_shared_tokens);
}

bool Engine::try_admit(Sequence& seq) {
  std::vector<kv::NodeId> path;
  const std::span<const std::int32_t> prompt(seq.request->prompt);
  // Boundaries the tree must have (pinned segment ends, where sharing ends): their prefixes first.
  std::vector<std::int64_t> boundaries = seq.request->segment_ends;
  boundaries.push_back(seq.shared_tokens);
  for (std::int64_t end : boundaries)
    if (end > 0 && end < seq.tree_tokens && !tree_->insert(prompt.first(static_cast<std::size_t>(end))))
      return false;
  if (seq.tree_tokens > 0) {
    auto inserted = tree_->insert(std::span(seq.request->prompt).first(static_cast<std::size_t>(seq.tree_tokens)));
    if (!inserted) return false;
    path = std::move(*inserted);
    tree_->lock(path);
  }
  const std::int64_t own = seq.tree_tokens - seq.shared_tokens + seq.request->max_new_tokens;
  const std::int64_t pages = ceil_div(own, pool_.page_size());
  auto allocated = pool_.allocate(pages);
  if (!allocated && tree_->make_room(pages)) allocated = pool_.allocate(pages);
  if (!allocated) {
    if (!path.empty()) tree_->unlock(path);
    return false;
  }
  seq.pages = std::move(*allocated);
  seq.leaf = path.empty() ? -1 : path.back();
  return true;
}

std::int64_t Engine::admit_and_prefill() {
  std::vector<Sequence*> admitted;
  while (!waiting_.empty() && running() < options_.max_running) {
    Sequence& seq = *waiting_.front();
    if (!try_admit(seq)) {
      if (!running_.empty() || !admitted.empty()) break;  // waits for pages to come back
      // Nothing else holds pages, so it never fits: it fails alone.
      Completion& c = completions_[seq.completion];
      c.finish_reason = "error";
      c.error = "the prompt and max_new_tokens do not fit in the KV pool";
      c.kv_pool_full = true;
      if (options_.on_finish) options_.on_finish(c);
      waiting_.pop_front();
      continue;
    }
    admitted.push_back(&seq);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    ++batch_;
  }
  // Prefill and the copies below are steps of their own: the decode steps in flight first.
  if (!admitted.empty()) drain();
  // New segments on the admitted paths, parents before children.
  std::vector<kv::NodeId> unfilled;
  for (const Sequence* seq : admitted)
    if (seq->leaf >= 0)
      for (kv::NodeId id : tree_->path_to(seq->leaf))
        if (!tree_->node(id).filled && std::find(unfilled.begin(), unfilled.end(), id) == unfilled.end())
          unfilled.push_back(id);
  if (!unfilled.empty()) {
    const auto start = Clock::now();
    prefill(unfilled);
    stats_.prefill_seconds += seconds_since(start);
  }
  // Each sequence copies the part of its prompt it does not share into its own pages, then
  // holds the tree only down to where its sharing ends.
  std::vector<std::int32_t> src, dst;
  for (Sequence* seq : admitted) {
    if (seq->leaf < 0 || seq->shared_tokens == seq->tree_tokens) continue;
    const std::vector<kv::NodeId> path = tree_->path_to(seq->leaf);
    kv::NodeId boundary = -1;
    std::int64_t at = 0;
    for (kv::NodeId id : path) {
      const kv::RadixNode& node = tree_->node(id);
      if (node.depth_tokens + static_cast<std::int64_t>(node.tokens.size()) == seq->shared_tokens) boundary = id;
      for (std::size_t i = 0; i < node.tokens.size(); ++i, ++at) {
        if (at < seq->shared_tokens) continue;
        src.push_back(slot_of(node.pages, node.first_slot, static_cast<std::int64_t>(i), pool_.page_size()));
        dst.push_back(slot_of(seq->pages, 0, at - seq->shared_tokens, pool_.page_size()));
      }
    }
    HG_CHECK(seq->shared_tokens == 0 || boundary >= 0, "Engine: no tree node ends where sharing ends");
    if (boundary >= 0) tree_->lock(tree_->path_to(boundary));
    tree_->unlock(path);
    seq->leaf = boundary;
    seq->own_tokens = seq->tree_tokens - seq->shared_tokens;
  }
  if (!src.empty()) runner_.copy_slots(src, dst);
  stats_.peak_running = std::max(stats_.peak_running, running());
  stats_.peak_kv_pages = std::max(stats_.peak_kv_pages, pool_.peak_used_pages());
  return running();
}

// Prefills `nodes` (unfilled, parents listed before children) in waves: a wave is every
// node whose parent is filled; a step takes the next chunk of each node of the wave. A chunk
// attends its filled ancestors and the node's tokens up to itself (causal), all as stacked
// segments read by the chunk's query rows.
void Engine::prefill(const std::vector<kv::NodeId>& nodes) {
  const int ps = pool_.page_size();
  std::vector<kv::NodeId> pending = nodes;
  std::unordered_map<kv::NodeId, std::int64_t> done;  // tokens of each node prefilled so far
  // Stack every segment, even one read by a single chunk: a prefill chunk has hundreds of
  // query rows, which the shared kernel's tiles serve far better than the decode path.
  plan::PlanOptions prefill_options = runner_.plan_options(AttentionMode::hydragen);
  prefill_options.min_sharers_to_stack = 1;
  prefill_options.min_segment_tokens_to_stack = 1;
  prefill_options.fold_when_stacking_saves_little = false;
  while (!pending.empty()) {
    std::vector<kv::NodeId> wave;
    for (kv::NodeId id : pending) {
      const kv::NodeId parent = tree_->node(id).parent;
      if (parent == kv::kRoot || tree_->node(parent).filled) wave.push_back(id);
    }
    HG_CHECK(!wave.empty(), "Engine::prefill: no node of the batch has a filled parent");
    while (!wave.empty()) {
      LayoutBuilder builder(*tree_, runner_.config(), ps);
      StepRows rows;
      std::vector<kv::NodeId> finished;
      for (kv::NodeId id : wave) {
        if (rows.size() >= options_.prefill_chunk_tokens) break;
        const kv::RadixNode& node = tree_->node(id);
        const std::int64_t begin = done[id];
        const std::int64_t len = std::min<std::int64_t>(static_cast<std::int64_t>(node.tokens.size()) - begin,
                                                        options_.prefill_chunk_tokens - rows.size());
        const int parent = builder.segment(node.parent);
        // The node so far (this chunk included: its K/V is written before attention) is a
        // segment of its own; a pseudo-sequence with an empty suffix holds the chunk's query
        // rows, causal by position. Every prefill segment is stacked (see below), so the
        // whole prefill runs on the shared-segment kernel's large row tiles.
        plan::PagedLayout::SegmentPages self;
        self.parent = parent;
        self.tokens = begin + len;
        self.first_slot = node.first_slot;
        self.pages.assign(node.pages.begin(), node.pages.begin() + ceil_div(node.first_slot + begin + len, ps));
        builder.layout.segments.push_back(std::move(self));
        plan::PagedLayout::SequencePages seq;
        seq.parent = static_cast<int>(builder.layout.segments.size()) - 1;
        seq.query_tokens = static_cast<int>(len);
        builder.layout.sequences.push_back(std::move(seq));
        for (std::int64_t i = begin; i < begin + len; ++i) {
          rows.tokens.push_back(node.tokens[static_cast<std::size_t>(i)]);
          rows.positions.push_back(static_cast<std::int32_t>(node.depth_tokens + i));
          rows.slots.push_back(slot_of(node.pages, node.first_slot, i, ps));
        }
        if ((done[id] = begin + len) == static_cast<std::int64_t>(node.tokens.size())) finished.push_back(id);
      }
      std::optional<plan::AttentionPlan> plan;
      if (options_.attention != AttentionMode::none)
        plan = plan::build_attention_plan(builder.layout, prefill_options);
      runner_.step(rows, plan ? &*plan : nullptr, nullptr, {}, false);
      stats_.prefill_tokens += rows.size();
      for (kv::NodeId id : finished) {
        tree_->set_filled(id);
        wave.erase(std::find(wave.begin(), wave.end(), id));
        pending.erase(std::find(pending.begin(), pending.end(), id));
      }
    }
  }
}

plan::PagedLayout Engine::decode_layout(int ahead) const {
  const int ps = pool_.page_size();
  LayoutBuilder builder(*tree_, runner_.config(), ps);
  for (const auto& seq : running_) {
    plan::PagedLayout::SequencePages pages;
    pages.parent = builder.segment(seq->leaf);
    pages.suffix_tokens = seq->own_tokens + 1 + ahead;
    pages.pages.assign(seq->pages.begin(), seq->pages.begin() + ceil_div(pages.suffix_tokens, ps));
    pages.query_tokens = 1;
    builder.layout.sequences.push_back(std::move(pages));
  }
  return std::move(builder.layout);
}

bool Engine::all_continue_after_this_step() const {
  const int ps = pool_.page_size();
  for (const auto& seq : running_) {
    if (static_cast<std::int64_t>(completions_[seq->completion].tokens.size()) + 1 >= seq->request->max_new_tokens ||
        ceil_div(seq->own_tokens + 2, ps) > static_cast<std::int64_t>(seq->pages.size()))
      return false;
  }
  return true;
}

bool Engine::decode_step() {
  if (!options_.overlap_steps) return decode_step_in_place();
  if (in_flight_.empty() && running_.empty()) return false;
  const auto start = Clock::now();
  if (in_flight_.empty()) launch_decode(0);
  if (next_step_can_follow()) launch_decode(1);
  collect_decode();
  stats_.decode_seconds += seconds_since(start);
  return true;
}

bool Engine::decode_step_in_place() {
  if (running_.empty()) return false;
  const auto start = Clock::now();
  const plan::PagedLayout layout = decode_layout();
  StepRows rows;
  StepSampling sampling;
  decode_inputs(layout, 0, rows, sampling);

  std::optional<plan::AttentionPlan> plan;
  bool plan_prepared = false;  // handed to the runner's prepare_plan during the last step
  std::function<void()> plan_next;
  if (options_.attention != AttentionMode::none) {
    const AttentionMode mode = options_.attention;
    // The plan built during the last step is this step's only if the layout is the same one
    // (nobody finished, joined or skipped tokens since): a plan is a function of its layout.
    if (plan_ahead_ && plan_ahead_->layout == layout) {
      plan = std::move(plan_ahead_->plan);
      plan_prepared = true;  // handed to prepare_plan when it was built
      stats_.plans_built_ahead += 1;
    } else {
      stats_.plans_ahead_discarded += plan_ahead_ ? 1 : 0;
      plan = plan::build_attention_plan(layout, runner_.plan_options(mode));
    }
    plan_ahead_.reset();
    if (options_.plan_ahead && all_continue_after_this_step()) {
      plan_next = [this, mode] {
        plan::PagedLayout next = decode_layout(1);
        plan::AttentionPlan next_plan = plan::build_attention_plan(next, runner_.plan_options(mode));
        runner_.prepare_plan(next_plan);
        plan_ahead_ = PlanAhead{std::move(next), std::move(next_plan)};
      };
    }
  }
  const SampledTokens out = runner_.step(rows, plan ? &*plan : nullptr, &sampling, plan_next, plan_prepared);

  std::vector<std::unique_ptr<Sequence>> still;
  for (std::size_t i = 0; i < running_.size(); ++i)
    if (take_token(*running_[i], out.tokens[i], out.logprobs[i])) still.push_back(std::move(running_[i]));
  if (still.size() != running_.size()) ++batch_;
  running_ = std::move(still);
  stats_.decode_tokens += static_cast<std::int64_t>(out.tokens.size());
  stats_.decode_steps += 1;
  stats_.decode_seconds += seconds_since(start);
  return true;
}

bool Engine::take_token(Sequence& seq, std::int32_t token, float logprob) {
  Completion& c = completions_[seq.completion];
  seq.own_tokens += 1;
  c.tokens.push_back(token);
  c.logprobs.push_back(logprob);
  if (options_.on_token) options_.on_token(seq.completion, token);
  const auto& stops = seq.request->stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end() || hit_stop_string(seq)) {
    finish(seq, "stop");
    return false;
  }
  if (static_cast<std::int64_t>(c.tokens.size()) >= seq.request->max_new_tokens) {
    finish(seq, "length");
    return false;
  }
  seq.next_token = token;
  return true;
}

bool Engine::next_step_can_follow() const {
  // The batch is the one in flight, so every running sequence has that one step in flight:
  // the test the plan built ahead takes.
  return in_flight_.size() == 1 && in_flight_.back().batch == batch_ && !running_.empty() &&
         all_continue_after_this_step();
}

void Engine::decode_inputs(const plan::PagedLayout& layout, int ahead, StepRows& rows, StepSampling& sampling) {
  const int ps = pool_.page_size();
  std::int64_t stored = 0, per_sequence = 0;
  for (const plan::PagedLayout::SegmentPages& seg : layout.segments) stored += seg.tokens;
  for (const auto& seq : running_) {
    rows.tokens.push_back(seq->next_token);  // (ahead 1: the runner takes the token from the step in flight)
    rows.positions.push_back(static_cast<std::int32_t>(seq->context() + ahead));
    rows.slots.push_back(slot_of(seq->pages, 0, seq->own_tokens + ahead, ps));
    const std::vector<std::int32_t>& generated = completions_[seq->completion].tokens;
    sampling.params.push_back(seq->params);
    sampling.steps.push_back(generated.size() + ahead);
    seq->held.append_row(seq->params, seq->request->prompt, generated, sampling.steps.back(), sampling.history);
    stored += seq->own_tokens + 1 + ahead;
    per_sequence += seq->context() + 1 + ahead;
  }
  if (per_sequence > stats_.per_sequence_tokens) stats_.stored_tokens = stored, stats_.per_sequence_tokens = per_sequence;
}

void Engine::launch_decode(int ahead) {
  const plan::PagedLayout layout = decode_layout(ahead);
  StepRows rows;
  StepSampling sampling;
  decode_inputs(layout, ahead, rows, sampling);
  InFlight flight{{}, batch_};
  for (const auto& seq : running_) flight.rows.push_back(seq.get());
  std::optional<plan::AttentionPlan> plan;
  if (options_.attention != AttentionMode::none)
    plan = plan::build_attention_plan(layout, runner_.plan_options(options_.attention));
  runner_.launch_decode(rows, plan ? &*plan : nullptr, sampling, ahead > 0);
  for (Sequence* seq : flight.rows) seq->in_flight += 1;
  in_flight_.push_back(std::move(flight));
  stats_.overlapped_steps += ahead > 0 ? 1 : 0;
}

void Engine::collect_decode() {
  const SampledTokens out = runner_.collect_decode();
  const InFlight flight = std::move(in_flight_.front());
  in_flight_.pop_front();
  HG_CHECK(out.tokens.size() == flight.rows.size(), "Engine: a decode step returned ", out.tokens.size(),
           " tokens for ", flight.rows.size(), " rows");
  bool left = false;
  for (std::size_t i = 0; i < flight.rows.size(); ++i) {
    Sequence& seq = *flight.rows[i];
    seq.in_flight -= 1;
    if (finished(seq)) {  // it stopped at the step before this one: this row ran past its end
      ++stats_.dropped_rows;
      continue;
    }
    ++stats_.decode_tokens;
    left |= !take_token(seq, out.tokens[i], out.logprobs[i]);
  }
  if (left) {
    std::vector<std::unique_ptr<Sequence>> still;
    for (auto& seq : running_) (finished(*seq) ? retired_ : still).push_back(std::move(seq));
    running_ = std::move(still);
    ++batch_;
  }
  std::erase_if(retired_, [](const std::unique_ptr<Sequence>& seq) { return seq->in_flight == 0; });
  stats_.decode_steps += 1;
}

void Engine::drain() {
  if (in_flight_.empty()) return;
  const auto start = Clock::now();
  while (!in_flight_.empty()) collect_decode();
  stats_.decode_seconds += seconds_since(start);
}

void Engine::set_overlap_steps(bool on) {
  if (!on) drain();
  options_.overlap_steps = on;
}

bool Engine::hit_stop_string(const Sequence& seq) const {
  if (seq.request->stop_strings.empty()) return false;
  // Only a stop string that ends in the newest token is new: decode a window of the last
  // tokens long enough to hold the longest one (every token is >= 1 byte of text, and 4
  // more keep a split multi-byte character away from where a match could start).
  std::size_t longest = 0;
  for (const std::string& stop : seq.request->stop_strings) longest = std::max(longest, stop.size());
  const std::vector<std::int32_t>& tokens = completions_[seq.completion].tokens;
  const std::size_t window = std::min(tokens.size(), longest + 4);
  const std::string text = options_.detokenize(std::span(tokens).last(window));
  for (const std::string& stop : seq.request->stop_strings)
    if (!stop.empty() && text.find(stop) != std::string::npos) return true;
  return false;
}

bool Engine::finished(const Sequence& seq) const { return !completions_[seq.completion].finish_reason.empty(); }

void Engine::finish(Sequence& seq, const char* reason) {
  completions_[seq.completion].finish_reason = reason;
  pool_.release(seq.pages);
  seq.pages.clear();
  if (seq.leaf >= 0) tree_->unlock(tree_->path_to(seq.leaf));
  seq.leaf = -1;
  if (options_.on_finish) options_.on_finish(completions_[seq.completion]);
}

void Engine::skip_suffix_tokens(std::int64_t tokens) {
  drain();
  for (const auto& seq : running_) {
    Completion& c = completions_[seq->completion];
    HG_CHECK(static_cast<std::int64_t>(c.tokens.size()) + tokens < seq->request->max_new_tokens,
             "Engine::skip_suffix_tokens: ", tokens, " more tokens pass max_new_tokens");
    seq->own_tokens += tokens;
    c.tokens.insert(c.tokens.end(), static_cast<std::size_t>(tokens), seq->next_token);
    c.logprobs.insert(c.logprobs.end(), static_cast<std::size_t>(tokens), 0.f);
  }
}

void Engine::run() {
  while (true) {
    admit_and_prefill();
    if (running_.empty() && waiting_.empty() && in_flight_.empty()) return;
    decode_step();
  }
}

std::vector<Completion> Engine::generate(std::span<const GenerationRequest> requests) {
  const std::size_t first = completions_.size();
  for (std::size_t r = 0; r < requests.size(); ++r) submit(requests[r], static_cast<int>(r));
  run();
  return {completions_.begin() + static_cast<std::ptrdiff_t>(first), completions_.end()};
}

}  // namespace hydragen::engine
