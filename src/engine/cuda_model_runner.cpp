// The CUDA ModelRunner: LlamaCuda's bf16 forward pass over a device page pool, attention by
// the PagedAttentionRunner, sampling on the device. A decode step is captured once per
// batch-size bucket in a CUDA graph and replayed: its inputs (tokens, positions, slots,
// sampling rows, the plan) live in fixed device buffers rewritten before each replay, and
// rows past the batch are padding that write their K/V to a sink page nobody reads.
#include "engine/model_runner.h"
#include "hydragen/error.h"

#ifdef HYDRAGEN_WITH_CUDA

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <optional>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/model_ops.h"
#include "backend/cuda/paged_attention_runner.h"
#include "backend/cuda/sampling.h"
#include "model/llama_cuda.h"

namespace hydragen::engine {

namespace {

constexpr std::int64_t kMinStepRows = 512;                     // prefill chunks up to max(this, max_batch) rows
constexpr std::int64_t kTopWords = 2 * sample::kMaxTopLogprobs;  // 32-bit words of a row's top-N

// Decode batches are padded up to one of these sizes, so a handful of graphs serve every batch.
std::int64_t bucket_for(std::int64_t rows) {
  std::int64_t bucket = 8;
  while (bucket < rows) bucket = bucket < 256 ? bucket * 2 : bucket + 128;
  return bucket;
}

template <class T>
T* pinned(std::int64_t count) {
  void* p = nullptr;
  HG_CUDA_CHECK(cudaMallocHost(&p, std::max<std::int64_t>(count, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

class CudaModelRunner final : public ModelRunner {
 public:
  CudaModelRunner(const ModelConfig& config, LlamaWeights&& weights, const RunnerOptions& options)
      : model_(config, weights), options_(options) {
    weights = LlamaWeights{};  // what the model did not keep goes back before the pool is sized
    HG_CHECK(cuda::supported_head_dim(static_cast<int>(config.head_dim)), "the CUDA attention kernels do not ",
             "support head_dim ", config.head_dim, " (supported: 64, 128)");
    capacity_ = std::max(options.max_batch, kMinStepRows);
    capacity_ = bucket_for(capacity_);
    buffers_ = model_.new_step_buffers(capacity_);
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // A step's inputs in one device block (one copy in, docs/perf-notes.md e14), its sampled
    // tokens and logprobs in another (one copy out), each mirrored by pinned host memory: two
    // mirrors used in turn, so a step can be staged while the last one is in flight.
    const std::int64_t cap = capacity_;  // a bucket: even, so the u64 steps after 3 i32 arrays are aligned
    HG_CHECK(cap % 2 == 0, "CudaModelRunner: odd step capacity ", cap);
    inputs_bytes_ = 3 * cap * sizeof(std::int32_t) + cap * sizeof(std::uint64_t) + cap * sizeof(sample::SamplingParams);
    for (Slot& slot : slots_) {
      slot.host_inputs = pinned<unsigned char>(inputs_bytes_);
      slot.host_outputs = pinned<std::int32_t>(output_words());
      for (cudaEvent_t* event : {&slot.start, &slot.stop, &slot.done}) HG_CUDA_CHECK(cudaEventCreate(event));
    }
    HG_CUDA_CHECK(cudaMalloc(&inputs_, inputs_bytes_));
    HG_CUDA_CHECK(cudaMalloc(&out_tokens_, output_words() * sizeof(std::int32_t)));
    out_logprobs_ = reinterpret_cast<float*>(out_tokens_ + cap);
    out_top_ = reinterpret_cast<sample::TokenLogprob*>(out_tokens_ + 2 * cap);
    grow_history(0);
    auto* device_i32 = static_cast<std::int32_t*>(inputs_);
    buffers_.tokens = Tensor::wrap(device_i32, {cap}, DType::i32, Device::cuda);
    buffers_.positions = Tensor::wrap(device_i32 + cap, {cap}, DType::i32, Device::cuda);
    buffers_.slots = Tensor::wrap(device_i32 + 2 * cap, {cap}, DType::i32, Device::cuda);
    steps_ = reinterpret_cast<std::uint64_t*>(device_i32 + 3 * cap);
    params_ = steps_ + cap;

    cuda::prepare_linear(stream_);  // (its memory is taken before the pool is sized, not after)
    std::size_t free_bytes = 0, total = 0;
    HG_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    const std::int64_t pages =
        kv_pool_pages(options, kv_bytes_per_token(), static_cast<std::int64_t>(free_bytes), kCudaKvReserveBytes);
    // One more page than reported: the sink that padding rows write to.
    kv_ = PagedKv::allocate(config, pages + 1, options.page_size, DType::bf16, Device::cuda);
    kv_pages_ = pages;
  }

  ~CudaModelRunner() override {
    cudaStreamSynchronize(stream_);  // (steps launched and never collected)
    destroy_graphs();
    cudaFree(inputs_), cudaFree(out_tokens_), cudaFree(history_);
    for (Slot& slot : slots_) {
      cudaFreeHost(slot.host_inputs), cudaFreeHost(slot.host_outputs), cudaFreeHost(slot.host_history);
      cudaEventDestroy(slot.start), cudaEventDestroy(slot.stop), cudaEventDestroy(slot.done);
    }
    cudaStreamDestroy(stream_);
  }

  const ModelConfig& config() const override { return model_.config(); }
  int page_size() const override { return kv_.page_size; }
  std::int64_t kv_pages() const override { return kv_pages_; }
  std::int64_t kv_bytes_per_token() const override { return PagedKv::bytes_per_token(config(), DType::bf16); }
  std::string device_name() const override {
    int device = 0;
    cudaDeviceProp prop{};
    HG_CUDA_CHECK(cudaGetDevice(&device));
    HG_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    return prop.name;
  }
  // Asked every step (by the engine and by upload): the first answer per mode is kept, as
  // working it out queries every kernel's occupancy.
  plan::PlanOptions plan_options(AttentionMode mode) const override {
    auto& cached = plan_options_[static_cast<std::size_t>(mode)];
    if (!cached)
      cached = cuda::plan_options_for_device(DType::bf16, static_cast<int>(config().head_dim), mode, true, kernel_overrides_);
    return *cached;
  }
  double last_step_device_seconds() const override { return last_device_seconds_; }
  bool decodes_with_graphs() const override { return options_.cuda_graphs && graphs_ok_ && !graphs_.empty(); }
  std::int64_t max_step_rows() const override { return capacity_; }

  SampledTokens step(const StepRows& rows, const plan::AttentionPlan* plan, const StepSampling* sampling,
                     const std::function<void()>& while_running, bool plan_prepared) override {
    HG_CHECK(in_flight_.empty(), "CudaModelRunner::step: ", in_flight_.size(), " decode steps launched and not collected");
    const int slot = launch(rows, plan, sampling, plan_prepared, false);
    if (while_running) while_running();  // host work under the device's
    return collect(slot, rows.size(), sampling != nullptr);
  }

  void launch_decode(const StepRows& rows, const plan::AttentionPlan* plan, const StepSampling& sampling,
                     bool tokens_from_last) override {
    HG_CHECK(in_flight_.size() < 2, "CudaModelRunner::launch_decode: two steps in flight already");
    const int slot = launch(rows, plan, &sampling, false, tokens_from_last);
    in_flight_.push_back({slot, rows.size()});
  }

  SampledTokens collect_decode() override {
    HG_CHECK(!in_flight_.empty(), "CudaModelRunner::collect_decode: no step in flight");
    const auto [slot, rows] = in_flight_.front();
    in_flight_.pop_front();
    return collect(slot, rows, true);
  }

  // The next step's plan packed into the attention runner's pinned staging while this step
  // runs; a plan past the runner's capacity waits for the step (upload grows the runner).
  void prepare_plan(const plan::AttentionPlan& plan) override {
    if (attention_ && attention_capacity_.holds(cuda::PlanCapacity::of(plan))) attention_->prepare(plan);
  }

  void copy_slots(std::span<const std::int32_t> src, std::span<const std::int32_t> dst) override {
    HG_CHECK(src.size() == dst.size(), "copy_slots: ", src.size(), " sources for ", dst.size(), " destinations");
    if (src.empty()) return;
    const auto count = static_cast<std::int64_t>(src.size());
    Tensor src_dev = Tensor::empty({count}, DType::i32, Device::cuda), dst_dev = src_dev.clone();
    src_dev.copy_from(Tensor::wrap(const_cast<std::int32_t*>(src.data()), {count}, DType::i32));
    dst_dev.copy_from(Tensor::wrap(const_cast<std::int32_t*>(dst.data()), {count}, DType::i32));
    for (std::int64_t l = 0; l < kv_.layers(); ++l) {
      Tensor k = kv_.k_slots(l), v = kv_.v_slots(l);
      cuda::copy_slots(src_dev, dst_dev, k, stream_);
      cuda::copy_slots(src_dev, dst_dev, v, stream_);
    }
    HG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

 private:
  // Two executable copies of each captured step, one per slot, so a step launched while the
  // one before it runs is another exec. (Added for a slowdown later traced to a device copy
  // between the steps, perf-notes e16d; one exec per bucket has not been timed since.)
  using GraphMap = std::map<std::pair<std::int64_t, int>, std::array<cudaGraphExec_t, 2>>;

  // Two of these, used in turn by the steps launched (launch, collect).
  struct Slot {
    unsigned char* host_inputs = nullptr;  // the pinned mirror of inputs_
    std::int32_t* host_outputs = nullptr;  // sampled tokens [capacity_], their logprobs, their top-N
    unsigned char* host_history = nullptr;  // the pinned mirror of history_
    bool top = false;                       // its step's copy out holds the top-N
    cudaEvent_t start = nullptr, stop = nullptr;  // around the step's kernels
    cudaEvent_t done = nullptr;                   // after its tokens' copy to host_outputs
  };

  // Enqueues a step in the next slot and returns the slot. That slot's last step has been
  // collected: at most two steps are launched and not collected, and they are collected in
  // order. tokens_from_last: the input tokens are the ones the last step's sampling wrote into
  // the input block (sample_rows' tokens_copy; the host's copy of the block skips them), so no
  // copy stands between the two steps on the device.
  int launch(const StepRows& rows, const plan::AttentionPlan* plan, const StepSampling* sampling, bool plan_prepared,
             bool tokens_from_last) {
    check_step_rows(rows, config(), kv_, plan);
    const std::int64_t n = rows.size();
    HG_CHECK(n <= capacity_, "CudaModelRunner::step: ", n, " rows, the buffers hold ", capacity_);
    HG_CHECK(!tokens_from_last || (sampling != nullptr && n == last_sampled_rows_),
             "CudaModelRunner::launch_decode: tokens from the last step need a decode step of its ", last_sampled_rows_,
             " rows, got ", n);
    const bool graphed = sampling != nullptr && options_.cuda_graphs && graphs_ok_;
    // Decode steps are padded to their bucket with or without graphs, so both run the same
    // GEMM shapes and give the same tokens.
    const std::int64_t padded = sampling != nullptr ? std::min(bucket_for(n), capacity_) : n;
    const int k = next_slot_;
    next_slot_ ^= 1;
    Slot& slot = slots_[k];
    // Host work first: the inputs and the plan packed into pinned staging.
    const std::size_t input_bytes = stage_inputs(rows, padded, sampling, slot.host_inputs);
    const std::size_t history_bytes = sampling != nullptr ? stage_history(*sampling, padded, slot) : 0;
    slot.top = sampling != nullptr && std::any_of(sampling->params.begin(), sampling->params.end(),
                                                  [](const sample::SamplingParams& p) { return p.logprobs > 0; });
    if (plan != nullptr && !(plan_prepared && attention_ && attention_->has_prepared()))
      prepare_upload(*plan);  // (else packed during the last step: prepare_plan)
    // The input block from the host; after a step in flight, from its positions on: that step's
    // sampling wrote its tokens into the block's tokens (sample_rows' tokens_copy).
    const std::size_t skip = tokens_from_last ? capacity_ * sizeof(std::int32_t) : 0;
    HG_CUDA_CHECK(cudaMemcpyAsync(static_cast<unsigned char*>(inputs_) + skip, slot.host_inputs + skip,
                                  input_bytes - skip, cudaMemcpyHostToDevice, stream_));
    if (history_bytes > 0)
      HG_CUDA_CHECK(cudaMemcpyAsync(history_, slot.host_history, history_bytes, cudaMemcpyHostToDevice, stream_));
    if (plan != nullptr) attention_->upload_prepared(stream_);  // one asynchronous copy on the step's stream

    HG_CUDA_CHECK(cudaEventRecord(slot.start, stream_));
    if (graphed) {
      const std::pair<std::int64_t, int> key{padded, plan ? attention_->launch_variant() : -1};
      auto it = graphs_.find(key);
      if (it == graphs_.end()) it = capture(key, plan != nullptr);
      if (it != graphs_.end()) HG_CUDA_CHECK(cudaGraphLaunch(it->second[k], stream_));
      else enqueue(padded, plan != nullptr, true);  // capture failed: eager from now on
    } else {
      enqueue(padded, plan != nullptr, sampling != nullptr);
    }
    HG_CUDA_CHECK(cudaEventRecord(slot.stop, stream_));
    if (sampling != nullptr) {
      // tokens [0, n) and logprobs [capacity_, capacity_ + n) in one copy, and the rows' top-N
      // after them where a row asked
      const std::int64_t words = slot.top ? 2 * capacity_ + n * kTopWords : capacity_ + n;
      HG_CUDA_CHECK(cudaMemcpyAsync(slot.host_outputs, out_tokens_, words * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
    }
    HG_CUDA_CHECK(cudaEventRecord(slot.done, stream_));
    last_sampled_rows_ = sampling != nullptr ? n : -1;
    return k;
  }

  // Waits for the step launched in `slot` (n rows) and returns its tokens if it sampled.
  SampledTokens collect(int k, std::int64_t n, bool sampled) {
    Slot& slot = slots_[k];
    HG_CUDA_CHECK(cudaEventSynchronize(slot.done));
    float ms = 0;
    HG_CUDA_CHECK(cudaEventElapsedTime(&ms, slot.start, slot.stop));
    last_device_seconds_ = ms * 1e-3;
    SampledTokens out;
    if (sampled) {
      const auto* logprobs = reinterpret_cast<const float*>(slot.host_outputs + capacity_);
      out.tokens.assign(slot.host_outputs, slot.host_outputs + n);
      out.logprobs.assign(logprobs, logprobs + n);
      if (slot.top) {
        const auto* top = reinterpret_cast<const sample::TokenLogprob*>(slot.host_outputs + 2 * capacity_);
        out.top.assign(top, top + n * sample::kMaxTopLogprobs);
      }
    }
    return out;
  }

  // Rows [0, n) from `rows`, [n, padded) padding: token 0 at position 0 into the sink page.
  // The host block mirrors the device one (tokens, positions, slots, steps, params at capacity
  // each); one copy moves it up to the end of the last array the step uses: returns its bytes.
  std::size_t stage_inputs(const StepRows& rows, std::int64_t padded, const StepSampling* sampling,
                           unsigned char* host_inputs) {
    const std::int64_t n = rows.size();
    const auto sink = static_cast<std::int32_t>(kv_pages_ * kv_.page_size);
    auto* tokens = reinterpret_cast<std::int32_t*>(host_inputs);
    std::int32_t* positions = tokens + capacity_;
    std::int32_t* slots = tokens + 2 * capacity_;
    auto* steps = reinterpret_cast<std::uint64_t*>(tokens + 3 * capacity_);
    auto* params = reinterpret_cast<sample::SamplingParams*>(steps + capacity_);
    for (std::int64_t r = 0; r < padded; ++r) {
      const bool real = r < n;
      tokens[r] = real ? rows.tokens[r] : 0;
      positions[r] = real ? rows.positions[r] : 0;
      slots[r] = real && rows.slots[r] >= 0 ? rows.slots[r] : sink;
    }
    std::size_t end = reinterpret_cast<unsigned char*>(slots + padded) - host_inputs;
    if (sampling != nullptr) {
      HG_CHECK(static_cast<std::int64_t>(sampling->params.size()) == n &&
                   sampling->steps.size() == sampling->params.size(),
               "CudaModelRunner::step: one sampling entry per row expected, got ", sampling->params.size(), " for ",
               n, " rows");
      for (std::int64_t r = 0; r < padded; ++r) {
        params[r] = r < n ? sampling->params[r] : sample::SamplingParams{};
        steps[r] = r < n ? sampling->steps[r] : 0;
      }
      end = reinterpret_cast<unsigned char*>(params + padded) - host_inputs;
    }
    return end;
  }

  // The step's penalty history into the slot's pinned mirror of history_ (offsets for every
  // row, padding rows empty, then the entries); returns the bytes to copy, 0 when no row has
  // penalties (no row reads the history then). Past the buffers' capacity they grow, and the
  // graphs that captured the old ones are dropped.
  std::size_t stage_history(const StepSampling& sampling, std::int64_t padded, Slot& slot) {
    if (std::none_of(sampling.params.begin(), sampling.params.end(), sample::has_penalties)) return 0;
    const std::int64_t n = static_cast<std::int64_t>(sampling.params.size());
    sample::validate_history(sampling.history, n, config().vocab_size);
    const auto entries = static_cast<std::int64_t>(sampling.history.entries.size());
    if (entries > history_capacity_) grow_history(entries);
    auto* offsets = reinterpret_cast<std::int32_t*>(slot.host_history);
    for (std::int64_t r = 0; r <= padded; ++r)
      offsets[r] = sampling.history.offsets.empty() ? 0 : sampling.history.offsets[std::min(r, n)];
    if (entries > 0)
      std::memcpy(slot.host_history + history_offsets_bytes(), sampling.history.entries.data(),
                  entries * sizeof(sample::TokenCount));
    return history_offsets_bytes() + entries * sizeof(sample::TokenCount);
  }

  // The history buffers for `entries` entries and half as many more, at least 4096 (after the
  // steps in flight).
  void grow_history(std::int64_t entries) {
    HG_CUDA_CHECK(cudaStreamSynchronize(stream_));
    destroy_graphs();
    history_capacity_ = std::max<std::int64_t>(entries + entries / 2, 4096);
    const std::size_t bytes = history_offsets_bytes() + history_capacity_ * sizeof(sample::TokenCount);
    cudaFree(history_);
    HG_CUDA_CHECK(cudaMalloc(&history_, bytes));
    for (Slot& s : slots_) {
      cudaFreeHost(s.host_history);
      s.host_history = pinned<unsigned char>(static_cast<std::int64_t>(bytes));
    }
  }
  // The offsets' part of the history buffers: capacity_ + 1 rows, rounded up to 8 bytes.
  std::size_t history_offsets_bytes() const { return ((capacity_ + 2) / 2) * 2 * sizeof(std::int32_t); }
  // 32-bit words of the output block: tokens and logprobs [capacity_] each, then the top-N.
  std::int64_t output_words() const { return 2 * capacity_ + capacity_ * kTopWords; }

  // The plan packed for the attention runner's buffers (its upload_prepared copies it); a plan
  // past its capacity makes a larger runner (and drops the graphs that captured the old one's
  // buffers). A plan prepared and not used is replaced.
  void prepare_upload(const plan::AttentionPlan& plan) {
    const cuda::PlanCapacity need = cuda::PlanCapacity::of(plan);
    if (!attention_ || !attention_capacity_.holds(need)) {
      auto grow = [](std::int64_t v) { return std::max<std::int64_t>(64, v + v / 2); };
      const cuda::PlanCapacity old = attention_ ? attention_capacity_ : cuda::PlanCapacity{};
      attention_capacity_ = old.max({grow(need.pages), grow(need.pieces), grow(need.rows), grow(need.shared_items),
                                     grow(need.suffix_items), grow(need.groups), grow(need.state_entries),
                                     grow(need.merge_rows)});
      HG_CUDA_CHECK(cudaStreamSynchronize(stream_));
      destroy_graphs();
      attention_ = std::make_unique<cuda::PagedAttentionRunner>(
          DType::bf16, static_cast<int>(config().head_dim), static_cast<int>(config().num_heads),
          static_cast<int>(config().num_kv_heads), attention_capacity_, kernel_overrides_);
    }
    attention_->prepare(plan);
  }

  void enqueue(std::int64_t rows, bool attend, bool sample) {
    auto k_slots = [this](std::int64_t l) { return kv_.k_slots(l); };
    auto v_slots = [this](std::int64_t l) { return kv_.v_slots(l); };
    LlamaCuda::AttendFn attention;
    if (attend) {
      attention = [this](std::int64_t l, const Tensor& q, Tensor& o, Tensor& lse) {
        cuda::PagedAttentionArgs args;
        args.q = q.raw();
        args.k_pool = kv_.k[static_cast<std::size_t>(l)].raw();
        args.v_pool = kv_.v[static_cast<std::size_t>(l)].raw();
        args.out = o.raw();
        args.out_lse = lse.data<float>();
        args.page_size = kv_.page_size;
        // RoPE just wrote q and this step's own K/V slots (a sequence's pages, a node being
        // prefilled, the sink): never a stacked segment's, so the shared launch may overlap it.
        args.q_from_previous_launch = true;
        attention_->run(args, stream_);
      };
    }
    model_.forward_rows(rows, buffers_, k_slots, v_slots, attention, sample, stream_);
    if (sample) {
      cuda::SamplingArgs args;
      args.params = static_cast<const sample::SamplingParams*>(params_);
      args.steps = steps_;
      args.input_tokens = buffers_.tokens.data<std::int32_t>();
      args.history_offsets = static_cast<const std::int32_t*>(history_);
      args.history =
          reinterpret_cast<const sample::TokenCount*>(static_cast<unsigned char*>(history_) + history_offsets_bytes());
      args.tokens = out_tokens_;
      args.logprobs = out_logprobs_;
      args.top = out_top_;
      args.tokens_copy = buffers_.tokens.data<std::int32_t>();  // the next step's inputs, if it follows on the device
      cuda::sample_rows(buffers_.logits.slice(0, 0, rows), args, stream_);
    }
  }

  void destroy_graphs() {
    for (auto& [key, execs] : graphs_)
      for (cudaGraphExec_t exec : execs) cudaGraphExecDestroy(exec);
    graphs_.clear();
  }

  // Captures the step twice (two graphs: a graph whose captured work allocates -- cuBLAS's
  // workspace -- may have one executable at a time) and instantiates each.
  GraphMap::iterator capture(std::pair<std::int64_t, int> key, bool attend) {
    std::array<cudaGraphExec_t, 2> execs{};
    auto drop_execs = [&] {
      for (cudaGraphExec_t e : execs)
        if (e) cudaGraphExecDestroy(e);
    };
    for (cudaGraphExec_t& exec : execs) {
      cudaGraph_t graph = nullptr;
      HG_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue(key.first, attend, true);
      } catch (...) {
        cudaStreamEndCapture(stream_, &graph);
        if (graph) cudaGraphDestroy(graph);
        drop_execs();
        throw;
      }
      const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
      const cudaError_t made = ended == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : ended;
      if (graph) cudaGraphDestroy(graph);
      if (made != cudaSuccess) {
        std::fprintf(stderr, "warning: CUDA graph capture failed (%s); decoding without graphs\n",
                     cudaGetErrorString(made));
        cudaGetLastError();
        drop_execs();
        graphs_ok_ = false;
        return graphs_.end();
      }
    }
    return graphs_.emplace(key, execs).first;
  }

  LlamaCuda model_;
  RunnerOptions options_;
  const cuda::KernelOverrides kernel_overrides_ = cuda::kernel_overrides_from_environment();  // (read once)
  std::int64_t capacity_ = 0, kv_pages_ = 0;
  LlamaCuda::StepBuffers buffers_;
  PagedKv kv_;
  std::unique_ptr<cuda::PagedAttentionRunner> attention_;
  cuda::PlanCapacity attention_capacity_;
  cudaStream_t stream_ = nullptr;
  // Step inputs: tokens, positions, slots (i32), steps (u64), params, capacity_ each; buffers_'
  // tokens, positions and slots are views of the device block.
  std::size_t inputs_bytes_ = 0;
  void* inputs_ = nullptr;
  std::uint64_t* steps_ = nullptr;  // in inputs_
  void* params_ = nullptr;          // in inputs_
  std::array<Slot, 2> slots_;
  int next_slot_ = 0;
  std::deque<std::pair<int, std::int64_t>> in_flight_;  // launch_decode's steps: slot, rows
  std::int64_t last_sampled_rows_ = -1;                 // rows of the step launched last (-1: it did not sample)
  // Step outputs: sampled tokens [capacity_], then their logprobs [capacity_], then their
  // top-N [capacity_, kMaxTopLogprobs].
  std::int32_t* out_tokens_ = nullptr;
  float* out_logprobs_ = nullptr;            // out_tokens_ + capacity_
  sample::TokenLogprob* out_top_ = nullptr;  // out_tokens_ + 2 * capacity_
  // Penalty history: offsets [capacity_ + 1] (history_offsets_bytes), then history_capacity_
  // entries.
  void* history_ = nullptr;
  std::int64_t history_capacity_ = 0;
  GraphMap graphs_;
  bool graphs_ok_ = true;
  mutable std::array<std::optional<plan::PlanOptions>, 4> plan_options_;  // per AttentionMode
  double last_device_seconds_ = -1;
};

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_runner(const ModelConfig& config, LlamaWeights weights,
                                              const RunnerOptions& options) {
  return std::make_unique<CudaModelRunner>(config, std::move(weights), options);
}

}  // namespace hydragen::engine

#else

namespace hydragen::engine {
std::unique_ptr<ModelRunner> make_cuda_runner(const ModelConfig&, LlamaWeights, const RunnerOptions&) {
  fail("--device cuda: this build has no CUDA backend (configure with -DHYDRAGEN_CUDA=ON)");
}
}  // namespace hydragen::engine

#endif
