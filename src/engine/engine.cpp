#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "engine/step_builder.h"
#include "hydragen/error.h"

namespace hydragen::engine {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr const char* kPoolFull = "the prompt and max_new_tokens do not fit in the KV pool";

}  // namespace

Engine::Engine(ModelRunner& runner, EngineOptions options)
    : runner_(runner),
      options_(std::move(options)),
      pool_(runner.kv_pages(), runner.page_size()),
      tree_(std::make_unique<kv::RadixTree>(pool_)),
      scheduler_(pool_, *tree_,
                 SchedulerOptions{std::min({options_.max_running, options_.max_step_tokens, runner.max_sampled_rows()}),
                                  std::min(options_.max_step_tokens, runner.max_step_rows())}) {
  HG_CHECK(options_.max_step_tokens >= 1, "Engine: max_step_tokens must be >= 1, got ", options_.max_step_tokens);
  HG_CHECK(options_.max_running >= 1, "Engine: max_running must be >= 1, got ", options_.max_running);
}

Engine::~Engine() {
  try {
    drain();  // nothing in flight refers to the sequences or buffers about to go
  } catch (...) {
  }
}

RequestId Engine::submit(GenerationRequest request) { return submit(std::move(request), false); }

RequestId Engine::submit(GenerationRequest request, bool keep) {
  const RequestId id = next_request_++;
  ++counters_.requests;
  const auto prompt = static_cast<std::int64_t>(request.prompt.size());
  // The tree holds all but the last prompt token; a sequence reads all of them, or fewer.
  const std::int64_t tree_tokens = std::max<std::int64_t>(prompt - 1, 0);
  std::int64_t shared = request.max_shared_tokens < 0 ? tree_tokens : std::min(tree_tokens, request.max_shared_tokens);
  if (options_.attention == AttentionMode::dense) shared = 0;
  const std::string error = request_error(request, runner_.config(), pool_.num_pages(), pool_.page_size(), shared,
                                          static_cast<bool>(options_.detokenize));
  RequestState& state = requests_[id];
  state.request = std::make_shared<const GenerationRequest>(std::move(request));
  state.keep = keep;
  const int samples = error.empty() ? state.request->n : std::max(1, state.request->n);
  state.unfinished = samples;
  state.live.assign(static_cast<std::size_t>(samples), nullptr);
  state.kept.resize(keep ? static_cast<std::size_t>(samples) : 0);
  if (!error.empty()) {
    for (int i = 0; i < samples; ++i) {
      Completion c;
      c.request = id, c.sample = i, c.finish_reason = "error", c.error = error;
      record(c);
    }
    return id;
  }
  counters_.prompt_tokens += prompt;
  for (int i = 0; i < samples; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->request = state.request;
    seq->completion.request = id;
    seq->completion.sample = i;
    seq->params = state.request->sampling;
    seq->params.seed = state.request->sampling.seed + static_cast<std::uint64_t>(i);
    seq->arrival = next_arrival_++;
    seq->tree_tokens = tree_tokens;
    seq->shared_tokens = shared;
    state.live[static_cast<std::size_t>(i)] = seq.get();
    scheduler_.enqueue(std::move(seq));
  }
  return id;
}

void Engine::cancel(RequestId request) {
  if (requests_.count(request) != 0) cancelled_.push_back(request);
}

void Engine::apply_cancellations() {
  for (RequestId id : std::exchange(cancelled_, {})) {
    auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    const std::vector<Sequence*> live = it->second.live;  // (finish edits it)
    for (Sequence* seq : live)
      if (seq != nullptr) finish(*seq, "cancelled");
  }
}

// The step loop: schedule, launch, collect (the step before this one while overlapping).
bool Engine::step() {
  const auto start = Clock::now();
  apply_cancellations();
  const bool overlap = options_.overlap_steps && !in_flight_.empty();
  const ScheduledStep work = scheduler_.schedule(overlap ? &in_flight_.back().rows : nullptr, true);
  for (Sequence* seq : work.refused) finish(*seq, "error", kPoolFull, true);
  if (!work.copy_src.empty()) runner_.copy_slots(work.copy_src, work.copy_dst);
  if (!work.empty()) launch(work);
  HG_CHECK(!work.empty() || !in_flight_.empty() || !work.refused.empty() || !work.copy_src.empty() ||
               scheduler_.idle(),
           "Engine::step: the scheduler found nothing to run for ", scheduler_.admitted(), " running and ",
           scheduler_.waiting(), " waiting sequences");
  bool decoded = !work.decode.empty();
  while (!in_flight_.empty() && (!options_.overlap_steps || work.empty() || in_flight_.size() > 1)) decoded |= collect();
  scheduler_.collect_garbage();
  stats_.peak_running = std::max(stats_.peak_running, scheduler_.admitted());
  stats_.peak_kv_pages = std::max(stats_.peak_kv_pages, pool_.peak_used_pages());
  (decoded ? stats_.decode_seconds : stats_.prefill_seconds) += seconds_since(start);
  return !scheduler_.idle() || !in_flight_.empty();
}

void Engine::run() {
  while (step()) {
  }
}

std::vector<Completion> Engine::generate(std::span<const GenerationRequest> requests) {
  std::vector<RequestId> ids;
  for (const GenerationRequest& r : requests) ids.push_back(submit(r, true));
  run();
  std::vector<Completion> out;
  for (RequestId id : ids) {
    auto it = requests_.find(id);
    HG_CHECK(it != requests_.end() && it->second.unfinished == 0, "Engine::generate: request ", id, " did not finish");
    for (Completion& c : it->second.kept) out.push_back(std::move(c));
    requests_.erase(it);
  }
  return out;
}

std::int64_t Engine::admit_and_prefill() {
  drain();
  const auto start = Clock::now();
  while (true) {
    apply_cancellations();
    const ScheduledStep work = scheduler_.schedule(nullptr, false);
    for (Sequence* seq : work.refused) finish(*seq, "error", kPoolFull, true);
    if (!work.copy_src.empty()) runner_.copy_slots(work.copy_src, work.copy_dst);
    if (!work.empty()) {
      launch(work);
      collect();
    } else if (work.copy_src.empty() && work.refused.empty()) {
      break;
    }
  }
  scheduler_.collect_garbage();
  stats_.peak_running = std::max(stats_.peak_running, scheduler_.admitted());
  stats_.peak_kv_pages = std::max(stats_.peak_kv_pages, pool_.peak_used_pages());
  stats_.prefill_seconds += seconds_since(start);
  return scheduler_.admitted();
}

void Engine::launch(const ScheduledStep& work) {
  std::optional<plan::PlanOptions> plan_options;
  if (options_.attention != AttentionMode::none) plan_options = runner_.plan_options(options_.attention);
  ContextTokens context;
  const StepWork step = build_step(work, *tree_, runner_.config(), plan_options ? &*plan_options : nullptr, context);
  if (context.per_sequence > stats_.per_sequence_tokens)
    stats_.stored_tokens = context.stored, stats_.per_sequence_tokens = context.per_sequence;
  runner_.launch(step);
  InFlight flight;
  for (Sequence* seq : work.decode) {
    flight.rows.push_back({seq, seq->epoch});
    seq->in_flight += 1;
    seq->held += 1;
  }
  stats_.overlapped_steps += in_flight_.empty() ? 0 : 1;
  stats_.prefill_tokens += step.rows.size() - step.sampling.size();
  stats_.mixed_steps += !work.decode.empty() && !work.prefill.empty() ? 1 : 0;
  in_flight_.push_back(std::move(flight));
}

bool Engine::collect() {
  const SampledTokens out = runner_.collect();
  const InFlight flight = std::move(in_flight_.front());
  in_flight_.pop_front();
  HG_CHECK(out.tokens.size() == flight.rows.size(), "Engine: a step returned ", out.tokens.size(), " tokens for ",
           flight.rows.size(), " decode rows");
  const auto now = Clock::now();
  for (std::size_t r = 0; r < flight.rows.size(); ++r) {
    Sequence& seq = *flight.rows[r].seq;
    seq.held -= 1;
    if (flight.rows[r].epoch != seq.epoch) {  // it left the batch after this row was launched
      ++stats_.dropped_rows;
      continue;
    }
    seq.in_flight -= 1;
    ++stats_.decode_tokens;
    std::span<const sample::TokenLogprob> top;
    if (seq.params.logprobs > 0 && !out.top.empty()) {
      const auto n = std::min<std::size_t>(static_cast<std::size_t>(seq.params.logprobs),
                                           static_cast<std::size_t>(runner_.config().vocab_size));
      top = std::span(out.top).subspan(r * sample::kMaxTopLogprobs, n);
    }
    take_token(seq, out.tokens[r], out.logprobs[r], top, now);
  }
  stats_.decode_steps += flight.rows.empty() ? 0 : 1;
  return !flight.rows.empty();
}

void Engine::drain() {
  while (!in_flight_.empty()) collect();
  scheduler_.collect_garbage();
}

void Engine::set_overlap_steps(bool on) {
  if (!on) drain();
  options_.overlap_steps = on;
}

void Engine::take_token(Sequence& seq, std::int32_t token, float logprob, std::span<const sample::TokenLogprob> top,
                        Clock::time_point time) {
  Completion& c = seq.completion;
  c.tokens.push_back(token);
  c.logprobs.push_back(logprob);
  if (seq.params.logprobs > 0) c.top_logprobs.emplace_back(top.begin(), top.end());
  ++counters_.generated_tokens;
  if (options_.on_token)
    options_.on_token(TokenEvent{c.request, c.sample, token, logprob, seq.generated() - 1, time,
                                 std::vector<sample::TokenLogprob>(top.begin(), top.end())});
  const auto& stops = seq.request->stop_token_ids;
  if (std::find(stops.begin(), stops.end(), token) != stops.end() || hit_stop_string(seq)) finish(seq, "stop");
  else if (seq.generated() >= seq.request->max_new_tokens) finish(seq, "length");
}

bool Engine::hit_stop_string(const Sequence& seq) const {
  if (seq.request->stop_strings.empty()) return false;
  // Only a stop string that ends in the newest token is new: decode a window of the last
  // tokens long enough to hold the longest one (every token is >= 1 byte of text, and 4
  // more keep a split multi-byte character away from where a match could start).
  std::size_t longest = 0;
  for (const std::string& stop : seq.request->stop_strings) longest = std::max(longest, stop.size());
  const std::vector<std::int32_t>& tokens = seq.completion.tokens;
  const std::size_t window = std::min(tokens.size(), longest + 4);
  const std::string text = options_.detokenize(std::span(tokens).last(window));
  for (const std::string& stop : seq.request->stop_strings)
    if (!stop.empty() && text.find(stop) != std::string::npos) return true;
  return false;
}

void Engine::finish(Sequence& seq, const char* reason, const std::string& error, bool pool_full) {
  scheduler_.release(seq);  // pages back; any row of it in flight is dropped when collected
  Completion& c = seq.completion;
  c.finish_reason = reason;
  c.error = error;
  c.kv_pool_full = pool_full;
  RequestState& state = requests_.at(c.request);
  state.live[static_cast<std::size_t>(c.sample)] = nullptr;
  record(c);
}

void Engine::record(const Completion& c) {
  const std::string& reason = c.finish_reason;
  (reason == "stop"        ? counters_.finished_stop
   : reason == "length"    ? counters_.finished_length
   : reason == "cancelled" ? counters_.finished_cancelled
                           : counters_.finished_error) += 1;
  if (options_.on_finish) options_.on_finish(c);
  auto it = requests_.find(c.request);
  RequestState& state = it->second;
  if (state.keep) state.kept[static_cast<std::size_t>(c.sample)] = c;
  if (--state.unfinished == 0 && !state.keep) requests_.erase(it);
}

void Engine::skip_suffix_tokens(std::int64_t tokens) {
  HG_CHECK(tokens >= 0, "Engine::skip_suffix_tokens: tokens must be >= 0, got ", tokens);
  drain();
  scheduler_.for_each_live([&](Sequence& seq) {
    if (seq.state != SequenceState::decoding) return;
    HG_CHECK(seq.generated() + tokens < seq.request->max_new_tokens, "Engine::skip_suffix_tokens: ", tokens,
             " more tokens pass max_new_tokens");
    const std::int32_t input = seq.own_token(seq.own_target());  // the next row's input token
    seq.completion.tokens.insert(seq.completion.tokens.end(), static_cast<std::size_t>(tokens), input);
    seq.completion.logprobs.insert(seq.completion.logprobs.end(), static_cast<std::size_t>(tokens), 0.f);
    if (seq.params.logprobs > 0)
      seq.completion.top_logprobs.insert(seq.completion.top_logprobs.end(), static_cast<std::size_t>(tokens), {});
  });
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m = counters_;
  m.prefix_cache_query_tokens = scheduler_.prefix_query_tokens();
  m.prefix_cache_hit_tokens = scheduler_.prefix_hit_tokens();
  m.preemptions = scheduler_.preemptions();
  m.running = scheduler_.admitted();
  m.waiting = scheduler_.waiting();
  const kv::RadixTree::PageUse use = tree_->page_use();
  m.kv_pages = pool_.num_pages();
  m.kv_pages_used = pool_.used_pages();
  m.kv_pages_cached = use.cached;
  m.kv_pages_shared = use.shared;
  return m;
}

}  // namespace hydragen::engine
