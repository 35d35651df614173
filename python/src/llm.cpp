// hydragen._hydragen.Engine: a model, its runner and an engine::Engine, driven step by step
// from Python (hydragen/llm.py) with the GIL released while a step runs. The Python side owns
// the loop, so Ctrl-C lands between steps and cancels cleanly.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>

#include <pybind11/stl.h>

#include "bindings.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "engine/stop_text.h"
#include "hydragen/error.h"
#include "model/model_config.h"
#include "model/presets.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "tensors.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;

namespace hydragen::python {

namespace {

struct EngineConfig {
  std::string model, random_weights, device = "cpu", attention = "hydragen";
  std::int64_t kv_memory = 0;
  int page_size = 64;
  std::int64_t max_batch = 256, max_step_tokens = 2048;
  std::uint64_t weights_seed = 0;
  bool cuda_graphs = true;
};

// (token, logprob) pairs of each token's top-N; empty without logprobs.
py::list top_list(const std::vector<std::vector<sample::TokenLogprob>>& top) {
  py::list out;
  for (const auto& row : top) {
    py::list entries;
    for (const sample::TokenLogprob& t : row) entries.append(py::make_tuple(t.token, t.logprob));
    out.append(entries);
  }
  return out;
}

// The engine is single-threaded and a step runs with the GIL released: a call from a second
// Python thread meanwhile is refused instead of racing it.
class Busy {
 public:
  explicit Busy(bool& busy) : busy_(busy) {
    HG_CHECK(!busy_, "LLM: the engine is busy in another thread (one call at a time)");
    busy_ = true;
  }
  ~Busy() { busy_ = false; }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;

 private:
  bool& busy_;
};

py::tuple completion_tuple(const engine::Completion& c) {
  return py::make_tuple(c.request, c.sample, c.tokens, c.logprobs, c.finish_reason, c.error, top_list(c.top_logprobs));
}

class PyEngine {
 public:
  explicit PyEngine(const EngineConfig& c) : c_(c) {
    HG_CHECK(c.model.empty() != c.random_weights.empty(), "LLM: give exactly one of model= (a model directory) and ",
             "random_weights= (a preset name)");
    HG_CHECK(c.device == "cpu" || c.device == "cuda", "LLM: device must be 'cpu' or 'cuda', got '", c.device, "'");
    attention_ = parse_mode(c.attention);
    if (!c.model.empty()) {
      HG_CHECK(std::filesystem::is_directory(c.model), "LLM: model '", c.model, "' is not a directory");
      config_ = load_model_config(c.model);
      tokenizer_ = load_model_tokenizer(c.model, config_.vocab_size);
      eos_ = model_eos_ids(c.model, tokenizer_.get(), config_.vocab_size);
    } else {
      config_ = load_preset(c.random_weights);
    }
    HG_CHECK(c.page_size >= 16 && (c.page_size & (c.page_size - 1)) == 0, "LLM: page_size must be a power of two >= 16, got ",
             c.page_size);
    HG_CHECK(c.kv_memory >= 0, "LLM: kv_memory must be >= 0 bytes (0: the default), got ", c.kv_memory);
    HG_CHECK(c.max_batch >= 1, "LLM: max_batch must be >= 1, got ", c.max_batch);
    HG_CHECK(c.max_step_tokens >= 1, "LLM: max_step_tokens must be >= 1, got ", c.max_step_tokens);
    const bool cuda = c.device == "cuda";
    if (!c.random_weights.empty())
      weights_ = cuda ? random_weights(config_, c.weights_seed, DType::bf16, Device::cuda)
                      : random_weights(config_, c.weights_seed);
    else
      weights_ = ::hydragen::load_weights(config_, Checkpoint(c.model), cuda ? DType::bf16 : DType::f32);
    make_runner();
    make_engine();
  }

  const ModelConfig& config() const { return config_; }
  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const std::vector<std::int32_t>& eos_ids() const { return eos_; }
  std::string device_name() const { return runner_->device_name(); }
  std::int64_t kv_pages() const { return runner_->kv_pages(); }

  std::vector<std::int32_t> encode(const std::string& text, bool add_special_tokens) const {
    return need_tokenizer("encode").encode(text, add_special_tokens);
  }
  std::string decode(const std::vector<std::int32_t>& ids, bool skip_special_tokens) const {
    return need_tokenizer("decode").decode(ids, skip_special_tokens);
  }
  // A completion's text: decoded, cut before the first stop string (as the CLI's --output).
  std::string text(const std::vector<std::int32_t>& ids, const std::vector<std::string>& stop) const {
    if (!tokenizer_) return {};
    engine::StopStringFilter filter(stop);
    const std::string shown = filter.push(tokenizer_->decode(ids, true));
    return shown + filter.finish();
  }

  std::int64_t submit(const std::vector<std::int32_t>& prompt, int n, const sample::SamplingParams& sampling,
                      std::int64_t max_tokens, const std::vector<std::int32_t>& stop_token_ids,
                      const std::vector<std::string>& stop, const std::vector<std::int64_t>& segment_ends,
                      const std::vector<std::int32_t>& forced_tokens) {
    engine::GenerationRequest r;
    r.prompt = prompt;
    r.n = n;
    r.sampling = sampling;
    r.max_new_tokens = max_tokens;
    r.stop_token_ids = stop_token_ids;
    r.stop_strings = stop;
    r.segment_ends = segment_ends;
    r.forced_tokens = forced_tokens;
    const Busy busy(busy_);
    return engine_->submit(std::move(r));
  }
  void cancel(std::int64_t request) {
    const Busy busy(busy_);
    engine_->cancel(request);
  }

  // One engine step, the GIL released: (more work left, tokens sampled, token events (request,
  // sample, token, logprob) when `events`, completions finished in it).
  py::tuple step(bool events) {
    bool more = false;
    const Busy busy(busy_);
    keep_events_ = events;
    {
      py::gil_scoped_release unlocked;
      more = engine_->step();
    }
    return drain_callbacks(more);
  }

  std::int64_t running() const { return engine_->running(); }
  std::int64_t waiting() const { return engine_->waiting(); }
  py::dict metrics() const {
    const Busy busy(busy_);
    const engine::EngineMetrics m = engine_->metrics();
    py::dict d;
    d["requests"] = m.requests, d["prompt_tokens"] = m.prompt_tokens, d["generated_tokens"] = m.generated_tokens;
    d["prefix_cache_query_tokens"] = m.prefix_cache_query_tokens;
    d["prefix_cache_hit_tokens"] = m.prefix_cache_hit_tokens;
    d["preemptions"] = m.preemptions, d["kv_pages"] = m.kv_pages, d["kv_pages_used"] = m.kv_pages_used;
    d["kv_pages_cached"] = m.kv_pages_cached;
    const engine::EngineStats& s = engine_->stats();
    d["prefill_seconds"] = s.prefill_seconds, d["decode_seconds"] = s.decode_seconds;
    d["prefill_tokens"] = s.prefill_tokens, d["decode_tokens"] = s.decode_tokens;
    return d;
  }

  // Copies of the weights, by checkpoint name (f32 on the CPU runner, bf16 on CUDA).
  py::dict weights() {
    const Busy busy(busy_);
    py::dict out;
    for_each_weight(config_, weights_, [&](const std::string& name, const std::vector<std::int64_t>&, Tensor& slot,
                                           WeightInit) { out[py::str(name)] = to_dlpack(slot.clone()); });
    return out;
  }

  // Replaces the named weights (names and shapes checked before anything changes), then drops
  // the prefix cache: cached K/V was computed with the old weights.
  void load_weights(const py::dict& given) {
    const Busy busy(busy_);
    HG_CHECK(engine_->running() == 0 && engine_->waiting() == 0, "load_weights: requests are still running");
    std::vector<std::pair<Tensor*, BorrowedTensor>> updates;
    std::size_t matched = 0;
    for_each_weight(config_, weights_, [&](const std::string& name, const std::vector<std::int64_t>& shape, Tensor& slot,
                                           WeightInit) {
      const py::str key(name);
      if (!given.contains(key)) return;
      ++matched;
      BorrowedTensor src(given[key], "load_weights: " + name);
      HG_CHECK(src.tensor().shape() == shape, "load_weights: ", name, " must be ", shape_str(shape), ", got ",
               src.tensor().shape_str());
      HG_CHECK(src.tensor().dtype() != DType::i32, "load_weights: ", name, " must be a float array, got int32");
      updates.emplace_back(&slot, std::move(src));
    });
    if (matched != given.size()) {
      std::vector<std::string> known;
      for_each_weight(config_, weights_, [&](const std::string& name, const std::vector<std::int64_t>&, Tensor&,
                                             WeightInit) { known.push_back(name); });
      for (const auto& [key, value] : given) {
        const auto name = py::cast<std::string>(key);
        HG_CHECK(std::find(known.begin(), known.end(), name) != known.end(), "load_weights: '", name,
                 "' is not a weight of this model (", known.size(), " weights, e.g. '", known.front(), "')");
      }
    }
    {
      py::gil_scoped_release unlocked;
      engine_->drain();
      engine_.reset();
      for (auto& [slot, src] : updates) {
        const Tensor& t = src.tensor();
        slot->copy_from(t.is_contiguous() || t.device() == Device::cuda ? t : t.clone());
      }
      // The CPU runner reads these very tensors; the CUDA runner holds stacked copies: rebuilt.
      if (c_.device == "cuda") {
        runner_.reset();
        make_runner();
      }
      make_engine();  // a new engine: an empty prefix cache over the same pool
    }
  }

  // A new engine over the same runner: an empty prefix cache (and metrics from zero).
  void reset_prefix_cache() {
    const Busy busy(busy_);
    HG_CHECK(engine_->running() == 0 && engine_->waiting() == 0, "reset_prefix_cache: requests are still running");
    py::gil_scoped_release unlocked;
    engine_->drain();
    engine_.reset();
    make_engine();
  }

 private:
  const Tokenizer& need_tokenizer(const char* what) const {
    HG_CHECK(tokenizer_ != nullptr, what, ": this model has no tokenizer (tokenizer.json or tokenizer.model): ",
             "give token ids");
    return *tokenizer_;
  }

  void make_runner() {
    engine::RunnerOptions o;
    o.page_size = c_.page_size;
    o.kv_memory_bytes = c_.kv_memory;
    o.max_batch = c_.max_batch;
    o.cuda_graphs = c_.cuda_graphs;
    runner_ = c_.device == "cuda" ? engine::make_cuda_runner(config_, weights_, o)
                                  : engine::make_cpu_runner(config_, weights_, o);
  }

  void make_engine() {
    engine::EngineOptions o;
    o.attention = attention_;
    o.max_running = c_.max_batch;
    o.max_step_tokens = c_.max_step_tokens;
    if (tokenizer_) o.detokenize = [this](std::span<const std::int32_t> ids) { return tokenizer_->decode(ids, true); };
    o.on_token = [this](const engine::TokenEvent& e) {
      ++tokens_;
      if (keep_events_) events_.push_back(e);
    };
    o.on_finish = [this](const engine::Completion& c) { finished_.push_back(c); };
    engine_ = std::make_unique<engine::Engine>(*runner_, std::move(o));
  }

  py::tuple drain_callbacks(bool more) {
    py::list event_list, finished;
    for (const engine::TokenEvent& e : events_) event_list.append(py::make_tuple(e.request, e.sample, e.token, e.logprob));
    for (const engine::Completion& c : finished_) finished.append(completion_tuple(c));
    const std::int64_t tokens = tokens_;
    events_.clear(), finished_.clear(), tokens_ = 0;
    return py::make_tuple(more, tokens, event_list, finished);
  }

  EngineConfig c_;
  AttentionMode attention_ = AttentionMode::hydragen;
  ModelConfig config_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::int32_t> eos_;
  LlamaWeights weights_;  // shares storage with the CPU runner's
  std::unique_ptr<engine::ModelRunner> runner_;
  std::unique_ptr<engine::Engine> engine_;
  std::vector<engine::TokenEvent> events_;
  std::vector<engine::Completion> finished_;
  std::int64_t tokens_ = 0;
  bool keep_events_ = false;
  mutable bool busy_ = false;  // a call is inside the engine (Busy)
};

}  // namespace

void bind_llm(py::module_& m) {
  py::class_<sample::SamplingParams>(m, "_SamplingParams")
      .def(py::init<>())
      .def_readwrite("temperature", &sample::SamplingParams::temperature)
      .def_readwrite("top_k", &sample::SamplingParams::top_k)
      .def_readwrite("top_p", &sample::SamplingParams::top_p)
      .def_readwrite("min_p", &sample::SamplingParams::min_p)
      .def_readwrite("seed", &sample::SamplingParams::seed)
      .def_readwrite("presence_penalty", &sample::SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &sample::SamplingParams::frequency_penalty)
      .def_readwrite("repetition_penalty", &sample::SamplingParams::repetition_penalty)
      .def_readwrite("logprobs", &sample::SamplingParams::logprobs)
      .def("validate", [](const sample::SamplingParams& p) { sample::validate(p); });

  py::class_<EngineConfig>(m, "_EngineConfig")
      .def(py::init<>())
      .def_readwrite("model", &EngineConfig::model)
      .def_readwrite("random_weights", &EngineConfig::random_weights)
      .def_readwrite("device", &EngineConfig::device)
      .def_readwrite("attention", &EngineConfig::attention)
      .def_readwrite("kv_memory", &EngineConfig::kv_memory)
      .def_readwrite("page_size", &EngineConfig::page_size)
      .def_readwrite("max_batch", &EngineConfig::max_batch)
      .def_readwrite("max_step_tokens", &EngineConfig::max_step_tokens)
      .def_readwrite("weights_seed", &EngineConfig::weights_seed)
      .def_readwrite("cuda_graphs", &EngineConfig::cuda_graphs);

  py::class_<PyEngine>(m, "_Engine")
      .def(py::init<const EngineConfig&>(), py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("vocab_size", [](const PyEngine& e) { return e.config().vocab_size; })
      .def_property_readonly("max_model_len", [](const PyEngine& e) { return e.config().max_position_embeddings; })
      .def_property_readonly("has_tokenizer", &PyEngine::has_tokenizer)
      .def_property_readonly("eos_token_ids", &PyEngine::eos_ids)
      .def_property_readonly("device_name", &PyEngine::device_name)
      .def_property_readonly("kv_pages", &PyEngine::kv_pages)
      .def("encode", &PyEngine::encode, py::arg("text"), py::arg("add_special_tokens") = true)
      .def("decode", &PyEngine::decode, py::arg("ids"), py::arg("skip_special_tokens") = true)
      .def("text", &PyEngine::text)
      .def("submit", &PyEngine::submit)
      .def("cancel", &PyEngine::cancel)
      .def("step", &PyEngine::step, py::arg("events") = false)
      .def_property_readonly("running", &PyEngine::running)
      .def_property_readonly("waiting", &PyEngine::waiting)
      .def("metrics", &PyEngine::metrics)
      .def("weights", &PyEngine::weights)
      .def("load_weights", &PyEngine::load_weights)
      .def("reset_prefix_cache", &PyEngine::reset_prefix_cache);
}

}  // namespace hydragen::python
