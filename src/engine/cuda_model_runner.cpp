// The CUDA ModelRunner: LlamaCuda's bf16 forward pass over a device page pool, attention by
// the PagedAttentionRunner, sampling on the device. A decode step is captured once per
// batch-size bucket in a CUDA graph and replayed: its inputs (tokens, positions, slots,
// sampling rows, the plan) live in fixed device buffers rewritten before each replay, and
// rows past the batch are padding that write their K/V to a sink page nobody reads. A step
// with prefill rows runs without a graph, its logits only for its decode rows.
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

constexpr std::int64_t kMinStepRows = 512;  // rows per step without RunnerOptions::max_step_rows: max(this, max_batch)
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
             "support head_dim ", config.head_dim, " (supported: ", cuda::supported_head_dims(), ")");
    HG_CHECK(options.max_batch >= 1 && options.max_step_rows >= 0, "CudaModelRunner: max_batch (", options.max_batch,
             ") must be >= 1 and max_step_rows (", options.max_step_rows, ") >= 0");
    capacity_ = bucket_for(std::max(options.max_batch, options.max_step_rows > 0 ? options.max_step_rows : kMinStepRows));
    sampled_capacity_ = std::min(bucket_for(options.max_batch), capacity_);
    buffers_ = model_.new_step_buffers(capacity_, sampled_capacity_);
    HG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    // A step's inputs in one device block (one copy in, docs/perf-notes.md e14), its sampled
    // tokens and logprobs in another (one copy out), each mirrored by pinned host memory: two
    // mirrors used in turn, so a step can be staged while the last one is in flight.
    const std::int64_t cap = capacity_;  // a bucket: even, so the u64 steps after 4 i32 arrays are aligned
    HG_CHECK(cap % 2 == 0, "CudaModelRunner: odd step capacity ", cap);
    inputs_bytes_ = 4 * cap * sizeof(std::int32_t) + cap * sizeof(std::uint64_t) + cap * sizeof(sample::SamplingParams);
    for (Slot& slot : slots_) {
      slot.host_inputs = pinned<unsigned char>(inputs_bytes_);
      slot.host_outputs = pinned<std::int32_t>(output_words());
      for (cudaEvent_t* event : {&slot.start, &slot.stop, &slot.done}) HG_CUDA_CHECK(cudaEventCreate(event));
    }
    HG_CUDA_CHECK(cudaMalloc(&inputs_, inputs_bytes_));
    HG_CUDA_CHECK(cudaMalloc(&out_tokens_, output_words() * sizeof(std::int32_t)));
    out_logprobs_ = reinterpret_cast<float*>(out_tokens_ + sampled_capacity_);
    out_top_ = reinterpret_cast<sample::TokenLogprob*>(out_tokens_ + 2 * sampled_capacity_);
    grow_history(0);
    auto* device_i32 = static_cast<std::int32_t*>(inputs_);
    buffers_.tokens = Tensor::wrap(device_i32, {cap}, DType::i32, Device::cuda);
    buffers_.positions = Tensor::wrap(device_i32 + cap, {cap}, DType::i32, Device::cuda);
    buffers_.slots = Tensor::wrap(device_i32 + 2 * cap, {cap}, DType::i32, Device::cuda);
    fed_from_ = device_i32 + 3 * cap;
    steps_ = reinterpret_cast<std::uint64_t*>(device_i32 + 4 * cap);
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
  std::int64_t max_sampled_rows() const override { return sampled_capacity_; }

  void launch(const StepWork& step) override {
    HG_CHECK(in_flight_.size() < 2, "CudaModelRunner::launch: two steps in flight already");
    HG_CHECK(step.fed_from.empty() || !in_flight_.empty(),
             "CudaModelRunner::launch: fed_from needs the step launched last in flight");
    const int slot = enqueue_step(step);
    in_flight_.push_back({slot, step.sampling.size()});
  }

  SampledTokens collect() override {
    HG_CHECK(!in_flight_.empty(), "CudaModelRunner::collect: no step in flight");
    const auto [slot, sampled] = in_flight_.front();
    in_flight_.pop_front();
    return collect(slot, sampled);
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
    std::int32_t* host_outputs = nullptr;   // sampled tokens [sampled_capacity_], their logprobs, their top-N
    unsigned char* host_history = nullptr;  // the pinned mirror of history_
    bool top = false;                       // its step's copy out holds the top-N
    cudaEvent_t start = nullptr, stop = nullptr;  // around the step's kernels
    cudaEvent_t done = nullptr;                   // after its tokens' copy to host_outputs
  };

  // Enqueues a step in the next slot and returns the slot. That slot's last step has been
  // collected: at most two steps are launched and not collected, and they are collected in
  // order. Fed rows: the last step's sampling wrote its tokens into the input block (sample_rows'
  // tokens_copy), so where row r is fed from row r (the batch kept its first rows) the host's
  // copy of the block skips them and nothing stands between the two steps on the device; other
  // fed rows are gathered from its sampled tokens.
  int enqueue_step(const StepWork& step) {
    const StepRows& rows = step.rows;
    const plan::AttentionPlan* plan = step.plan ? &*step.plan : nullptr;
    check_step_rows(rows, config(), kv_, plan);
    const std::int64_t n = rows.size(), sampled = step.sampling.size();
    const auto fed = static_cast<std::int64_t>(step.fed_from.size());
    HG_CHECK(n <= capacity_ && sampled <= sampled_capacity_ && sampled <= n && fed <= sampled,
             "CudaModelRunner::launch: ", n, " rows (the buffers hold ", capacity_, "), ", sampled, " sampled (at most ",
             sampled_capacity_, "), ", fed, " fed");
    bool in_order = true;  // row r fed from row r
    for (std::int64_t r = 0; r < fed; ++r) {
      HG_CHECK(step.fed_from[r] >= 0 && step.fed_from[r] < last_sampled_rows_, "CudaModelRunner::launch: fed_from[", r,
               "] = ", step.fed_from[r], " is not a sampled row of the last step (", last_sampled_rows_, ")");
      in_order &= step.fed_from[r] == r;
    }
    // A decode step is padded to its bucket and replays a graph; a step with prefill rows runs
    // as it is, eagerly.
    const bool decode_only = !step.has_prefill_rows() && sampled > 0;
    const std::int64_t padded = decode_only ? std::min(bucket_for(n), sampled_capacity_) : n;
    const std::int64_t logit_rows = decode_only ? padded : sampled;
    const int k = next_slot_;
    next_slot_ ^= 1;
    Slot& slot = slots_[k];
    // Host work first: the inputs and the plan packed into pinned staging.
    const std::size_t input_bytes = stage_inputs(step, padded, logit_rows, slot.host_inputs);
    const std::size_t history_bytes = logit_rows > 0 ? stage_history(step.sampling, logit_rows, slot) : 0;
    slot.top = std::any_of(step.sampling.params.begin(), step.sampling.params.end(),
                           [](const sample::SamplingParams& p) { return p.logprobs > 0; });
    if (plan != nullptr) prepare_upload(*plan);
    const std::size_t skip = in_order ? fed * sizeof(std::int32_t) : 0;
    HG_CUDA_CHECK(cudaMemcpyAsync(static_cast<unsigned char*>(inputs_) + skip, slot.host_inputs + skip,
                                  input_bytes - skip, cudaMemcpyHostToDevice, stream_));
    if (history_bytes > 0)
      HG_CUDA_CHECK(cudaMemcpyAsync(history_, slot.host_history, history_bytes, cudaMemcpyHostToDevice, stream_));
    if (!in_order) {
      Tensor tokens = buffers_.tokens.slice(0, 0, fed);
      cuda::gather_rows(Tensor::wrap(out_tokens_, {last_sampled_rows_}, DType::i32, Device::cuda),
                        Tensor::wrap(fed_from_, {fed}, DType::i32, Device::cuda), tokens, stream_);
    }
    if (plan != nullptr) attention_->upload_prepared(stream_);  // one asynchronous copy on the step's stream

    HG_CUDA_CHECK(cudaEventRecord(slot.start, stream_));
    // RoPE writes this step's K/V; only a decode step's slots are never a stacked segment's.
    const bool attention_after_rope = decode_only;
    if (decode_only && options_.cuda_graphs && graphs_ok_) {
      const std::pair<std::int64_t, int> key{padded, plan ? attention_->launch_variant() : -1};
      auto it = graphs_.find(key);
      if (it == graphs_.end()) it = capture(key, plan != nullptr);
      if (it != graphs_.end()) HG_CUDA_CHECK(cudaGraphLaunch(it->second[k], stream_));
      else enqueue(padded, plan != nullptr, padded, true);  // capture failed: eager from now on
    } else {
      enqueue(padded, plan != nullptr, logit_rows, attention_after_rope);
    }
    HG_CUDA_CHECK(cudaEventRecord(slot.stop, stream_));
    if (sampled > 0) {
      // tokens [0, sampled) and logprobs [sampled_capacity_, sampled_capacity_ + sampled) in one
      // copy, and the rows' top-N after them where a row asked
      const std::int64_t words = slot.top ? 2 * sampled_capacity_ + sampled * kTopWords : sampled_capacity_ + sampled;
      HG_CUDA_CHECK(cudaMemcpyAsync(slot.host_outputs, out_tokens_, words * sizeof(std::int32_t),
                                    cudaMemcpyDeviceToHost, stream_));
    }
    HG_CUDA_CHECK(cudaEventRecord(slot.done, stream_));
    last_sampled_rows_ = sampled;
    return k;
  }

  // Waits for the step launched in `slot` and returns the tokens of its `sampled` rows.
  SampledTokens collect(int k, std::int64_t sampled) {
    Slot& slot = slots_[k];
    HG_CUDA_CHECK(cudaEventSynchronize(slot.done));
    float ms = 0;
    HG_CUDA_CHECK(cudaEventElapsedTime(&ms, slot.start, slot.stop));
    last_device_seconds_ = ms * 1e-3;
    SampledTokens out;
    const auto* logprobs = reinterpret_cast<const float*>(slot.host_outputs + sampled_capacity_);
    out.tokens.assign(slot.host_outputs, slot.host_outputs + sampled);
    out.logprobs.assign(logprobs, logprobs + sampled);
    if (slot.top && sampled > 0) {
      const auto* top = reinterpret_cast<const sample::TokenLogprob*>(slot.host_outputs + 2 * sampled_capacity_);
      out.top.assign(top, top + sampled * sample::kMaxTopLogprobs);
    }
    return out;
  }

  // Rows [0, n) from the step, [n, padded) padding: token 0 at position 0 into the sink page.
  // The host block mirrors the device one (tokens, positions, slots, fed_from, steps, params at
  // capacity each); one copy moves it up to the end of the last array the step uses: returns
  // its bytes. Sampling entries for `logit_rows` rows (padding: greedy, step 0).
  std::size_t stage_inputs(const StepWork& step, std::int64_t padded, std::int64_t logit_rows,
                           unsigned char* host_inputs) {
    const StepRows& rows = step.rows;
    const std::int64_t n = rows.size(), sampled = step.sampling.size();
    const auto sink = static_cast<std::int32_t>(kv_pages_ * kv_.page_size);
    auto* tokens = reinterpret_cast<std::int32_t*>(host_inputs);
    std::int32_t* positions = tokens + capacity_;
    std::int32_t* slots = tokens + 2 * capacity_;
    std::int32_t* fed_from = tokens + 3 * capacity_;
    auto* steps = reinterpret_cast<std::uint64_t*>(tokens + 4 * capacity_);
    auto* params = reinterpret_cast<sample::SamplingParams*>(steps + capacity_);
    for (std::int64_t r = 0; r < padded; ++r) {
      const bool real = r < n;
      tokens[r] = real ? rows.tokens[r] : 0;
      positions[r] = real ? rows.positions[r] : 0;
      slots[r] = real && rows.slots[r] >= 0 ? rows.slots[r] : sink;
    }
    std::copy(step.fed_from.begin(), step.fed_from.end(), fed_from);
    std::size_t end = reinterpret_cast<unsigned char*>(step.fed_from.empty() ? slots + padded
                                                                              : fed_from + step.fed_from.size()) -
                      host_inputs;
    if (logit_rows > 0) {
      for (std::int64_t r = 0; r < logit_rows; ++r) {
        params[r] = r < sampled ? step.sampling.params[r] : sample::SamplingParams{};
        steps[r] = r < sampled ? step.sampling.steps[r] : 0;
      }
      end = reinterpret_cast<unsigned char*>(params + logit_rows) - host_inputs;
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
  // The offsets' part of the history buffers: sampled_capacity_ + 1 rows, rounded up to 8 bytes.
  std::size_t history_offsets_bytes() const { return ((sampled_capacity_ + 2) / 2) * 2 * sizeof(std::int32_t); }
  // 32-bit words of the output block: tokens and logprobs [sampled_capacity_] each, then the top-N.
  std::int64_t output_words() const { return 2 * sampled_capacity_ + sampled_capacity_ * kTopWords; }

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

  // The forward pass of `rows` rows, logits and sampling of the first logit_rows of them.
  // attention_after_rope: the attention may start as RoPE's programmatic dependent (only where
  // RoPE writes no slot of a stacked segment: PagedAttentionArgs::q_from_previous_launch).
  void enqueue(std::int64_t rows, bool attend, std::int64_t logit_rows, bool attention_after_rope) {
    auto k_slots = [this](std::int64_t l) { return kv_.k_slots(l); };
    auto v_slots = [this](std::int64_t l) { return kv_.v_slots(l); };
    LlamaCuda::AttendFn attention;
    if (attend) {
      attention = [this, attention_after_rope](std::int64_t l, const Tensor& q, Tensor& o, Tensor& lse) {
        cuda::PagedAttentionArgs args;
        args.q = q.raw();
        args.k_pool = kv_.k[static_cast<std::size_t>(l)].raw();
        args.v_pool = kv_.v[static_cast<std::size_t>(l)].raw();
        args.out = o.raw();
        args.out_lse = lse.data<float>();
        args.page_size = kv_.page_size;
        args.q_from_previous_launch = attention_after_rope;
        attention_->run(args, stream_);
      };
    }
    model_.forward_rows(rows, buffers_, k_slots, v_slots, attention, logit_rows > 0, stream_, logit_rows);
    if (logit_rows > 0) {
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
      cuda::sample_rows(buffers_.logits.slice(0, 0, logit_rows), args, stream_);
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
        enqueue(key.first, attend, key.first, true);
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
  std::int64_t capacity_ = 0, sampled_capacity_ = 0, kv_pages_ = 0;
  LlamaCuda::StepBuffers buffers_;
  PagedKv kv_;
  std::unique_ptr<cuda::PagedAttentionRunner> attention_;
  cuda::PlanCapacity attention_capacity_;
  cudaStream_t stream_ = nullptr;
  // Step inputs: tokens, positions, slots, fed_from (i32), steps (u64), params, capacity_ each;
  // buffers_' tokens, positions and slots are views of the device block.
  std::size_t inputs_bytes_ = 0;
  void* inputs_ = nullptr;
  std::int32_t* fed_from_ = nullptr;  // in inputs_
  std::uint64_t* steps_ = nullptr;    // in inputs_
  void* params_ = nullptr;          // in inputs_
  std::array<Slot, 2> slots_;
  int next_slot_ = 0;
  std::deque<std::pair<int, std::int64_t>> in_flight_;  // steps launched: slot, sampled rows
  std::int64_t last_sampled_rows_ = 0;                  // sampled rows of the step launched last
  // Step outputs: sampled tokens [sampled_capacity_], then their logprobs [sampled_capacity_],
  // then their top-N [sampled_capacity_, kMaxTopLogprobs].
  std::int32_t* out_tokens_ = nullptr;
  float* out_logprobs_ = nullptr;            // out_tokens_ + sampled_capacity_
  sample::TokenLogprob* out_top_ = nullptr;  // out_tokens_ + 2 * sampled_capacity_
  // Penalty history: offsets [sampled_capacity_ + 1] (history_offsets_bytes), then
  // history_capacity_ entries.
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
