// The CPU ModelRunner: Llama::forward_paged over an f32 page pool, sampling on the CPU.
#include "backend/cpu/paged_attention_cpu.h"
#include "engine/model_runner.h"

#include <algorithm>

#include "hydragen/error.h"
#include "model/llama.h"
#include "model/model_ops.h"

namespace hydragen::engine {

namespace {

class CpuModelRunner final : public HostModelRunner {
 public:
  CpuModelRunner(const ModelConfig& config, LlamaWeights weights, const RunnerOptions& options)
      : model_(config, std::move(weights)) {
    const std::int64_t pages = kv_pool_pages(options, PagedKv::bytes_per_token(config, DType::f32), -1, 0);
    kv_ = PagedKv::allocate(config, pages, options.page_size, DType::f32, Device::cpu);
  }

  const ModelConfig& config() const override { return model_.config(); }
  int page_size() const override { return kv_.page_size; }
  std::int64_t kv_pages() const override { return kv_.pages(); }
  std::int64_t kv_bytes_per_token() const override { return PagedKv::bytes_per_token(config(), DType::f32); }
  std::string device_name() const override { return "cpu"; }
  std::int64_t max_step_rows() const override { return std::int64_t{1} << 30; }
  plan::PlanOptions plan_options(AttentionMode mode) const override { return cpu::plan_options(mode, true); }

  void copy_slots(std::span<const std::int32_t> src, std::span<const std::int32_t> dst) override {
    HG_CHECK(src.size() == dst.size(), "copy_slots: ", src.size(), " sources for ", dst.size(), " destinations");
    const auto count = static_cast<std::int64_t>(src.size());
    const Tensor src_slots = Tensor::wrap(const_cast<std::int32_t*>(src.data()), {count}, DType::i32);
    const Tensor dst_slots = Tensor::wrap(const_cast<std::int32_t*>(dst.data()), {count}, DType::i32);
    for (std::int64_t l = 0; l < kv_.layers(); ++l) {
      Tensor k = kv_.k_slots(l), v = kv_.v_slots(l);
      hydragen::copy_slots(src_slots, dst_slots, k);
      hydragen::copy_slots(src_slots, dst_slots, v);
    }
  }

 private:
  SampledTokens compute(const StepRows& rows, const plan::AttentionPlan* plan, const StepSampling& sampling) override {
    const std::int64_t sampled = sampling.size();
    const Tensor logits = model_.forward_paged(rows, plan, kv_, sampled > 0, sampled);
    SampledTokens out;
    if (sampled == 0) return out;
    out.tokens.resize(static_cast<std::size_t>(sampled));
    out.logprobs.resize(static_cast<std::size_t>(sampled));
    if (std::any_of(sampling.params.begin(), sampling.params.end(),
                    [](const sample::SamplingParams& p) { return p.logprobs > 0; }))
      out.top.resize(static_cast<std::size_t>(sampled) * sample::kMaxTopLogprobs);
    const std::span<const std::int32_t> inputs = std::span(rows.tokens).first(static_cast<std::size_t>(sampled));
    sample::sample_rows(logits, sampling.params, sampling.steps, inputs, sampling.history, out.tokens, out.logprobs,
                        out.top);
    return out;
  }

  Llama model_;
  PagedKv kv_;
};

}  // namespace

std::unique_ptr<ModelRunner> make_cpu_runner(const ModelConfig& config, LlamaWeights weights,
                                             const RunnerOptions& options) {
  return std::make_unique<CpuModelRunner>(config, std::move(weights), options);
}

}  // namespace hydragen::engine
