// The model tests' driver of the paged forward pass (the engine's path) without the engine:
// a prompt's logits at every position and greedy continuations, over a page pool laid out as
// the engine lays it out, on the CPU (Llama::forward_paged) or a CUDA device
// (LlamaCuda::forward_rows + PagedAttentionRunner). A shared prefix is prefilled once as a
// tree segment that every sequence reads (stacked in hydragen mode even where the dispatch
// rule would fold it, so that each mode runs a plan of its own); dense copies it into each
// sequence's pages first.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/paged_attention_cpu.h"
#include "hydragen/attention.h"
#include "hydragen/error.h"
#include "model/llama.h"
#include "model/llama_cuda.h"
#include "model/model_ops.h"
#include "model/paged_kv.h"
#include "plan/paged_plan.h"
#include "test_model_fixtures.h"
#ifdef HYDRAGEN_WITH_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/model_ops.h"
#include "backend/cuda/paged_attention_runner.h"
#endif

namespace hydragen::test {

// A model on a device as the driver uses it: a pool of pages, one step over it.
class PagedStepper {
 public:
  virtual ~PagedStepper() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int page_size() const = 0;
  // A fresh pool of `pages` pages (the last one's K/V are gone).
  virtual void allocate(std::int64_t pages) = 0;
  virtual plan::PlanOptions plan_options(AttentionMode mode) const = 0;
  // Writes the rows' K/V at their slots, attends through `plan`; f32 CPU logits [rows, vocab].
  virtual Tensor step(const StepRows& rows, const plan::AttentionPlan& plan) = 0;
  // Slot dst[i] := slot src[i] in every layer.
  virtual void copy_slots(const std::vector<std::int32_t>& src, const std::vector<std::int32_t>& dst) = 0;
};

// The fp32 CPU forward over an f32 pool poisoned with NaN (a slot read before it is written shows).
class CpuStepper final : public PagedStepper {
 public:
  explicit CpuStepper(const Llama& model, int page_size = 16) : model_(model), page_size_(page_size) {}
  const ModelConfig& config() const override { return model_.config(); }
  int page_size() const override { return page_size_; }
  void allocate(std::int64_t pages) override { kv_ = poisoned_pool(config(), pages, page_size_); }
  plan::PlanOptions plan_options(AttentionMode mode) const override { return cpu::plan_options(mode, true); }
  Tensor step(const StepRows& rows, const plan::AttentionPlan& plan) override {
    return model_.forward_paged(rows, &plan, kv_, true);
  }
  void copy_slots(const std::vector<std::int32_t>& src, const std::vector<std::int32_t>& dst) override {
    std::vector<std::int32_t> s = src, d = dst;
    const auto n = static_cast<std::int64_t>(s.size());
    const Tensor src_slots = Tensor::wrap(s.data(), {n}, DType::i32), dst_slots = Tensor::wrap(d.data(), {n}, DType::i32);
    for (std::int64_t l = 0; l < kv_.layers(); ++l) {
      Tensor k = kv_.k_slots(l), v = kv_.v_slots(l);
      hydragen::copy_slots(src_slots, dst_slots, k);
      hydragen::copy_slots(src_slots, dst_slots, v);
    }
  }

 private:
  const Llama& model_;
  int page_size_;
  PagedKv kv_;
};

#ifdef HYDRAGEN_WITH_CUDA
// The bf16 CUDA forward over a bf16 device pool; each step uploads its plan to a runner of
// the plan's size and waits for the device.
class CudaStepper final : public PagedStepper {
 public:
  explicit CudaStepper(const LlamaCuda& model, int page_size = 16) : model_(model), page_size_(page_size) {}
  const ModelConfig& config() const override { return model_.config(); }
  int page_size() const override { return page_size_; }
  void allocate(std::int64_t pages) override {
    kv_ = PagedKv::allocate(config(), pages, page_size_, DType::bf16, Device::cuda);
  }
  plan::PlanOptions plan_options(AttentionMode mode) const override {
    return cuda::plan_options_for_device(DType::bf16, static_cast<int>(config().head_dim), mode, true);
  }
  Tensor step(const StepRows& rows, const plan::AttentionPlan& plan) override {
    const std::int64_t n = rows.size();
    LlamaCuda::StepBuffers b = model_.new_step_buffers(n);
    b.tokens.copy_from(device_i32(rows.tokens));
    b.positions.copy_from(device_i32(rows.positions));
    b.slots.copy_from(device_i32(rows.slots));
    const ModelConfig& c = config();
    cuda::PagedAttentionRunner runner(DType::bf16, static_cast<int>(c.head_dim), static_cast<int>(c.num_heads),
                                      static_cast<int>(c.num_kv_heads), cuda::PlanCapacity::of(plan),
                                      plan_options(AttentionMode::hydragen).shared_tile_rows);
    runner.upload(plan);
    auto attend = [&](std::int64_t l, const Tensor& q, Tensor& o, Tensor& lse) {
      cuda::PagedAttentionArgs args;
      args.q = q.raw(), args.out = o.raw(), args.out_lse = lse.data<float>();
      args.k_pool = kv_.k[static_cast<std::size_t>(l)].raw(), args.v_pool = kv_.v[static_cast<std::size_t>(l)].raw();
      args.page_size = page_size_;
      runner.run(args);
    };
    model_.forward_rows(
        n, b, [&](std::int64_t l) { return kv_.k_slots(l); }, [&](std::int64_t l) { return kv_.v_slots(l); }, attend,
        true, nullptr);
    HG_CHECK(cudaDeviceSynchronize() == cudaSuccess, "CudaStepper: the step failed");
    return b.logits.slice(0, 0, n).to(Device::cpu);
  }
  void copy_slots(const std::vector<std::int32_t>& src, const std::vector<std::int32_t>& dst) override {
    const Tensor src_slots = device_i32(src), dst_slots = device_i32(dst);
    for (std::int64_t l = 0; l < kv_.layers(); ++l) {
      Tensor k = kv_.k_slots(l), v = kv_.v_slots(l);
      cuda::copy_slots(src_slots, dst_slots, k);
      cuda::copy_slots(src_slots, dst_slots, v);
    }
  }

 private:
  static Tensor device_i32(std::vector<std::int32_t> values) {
    return Tensor::wrap(values.data(), {static_cast<std::int64_t>(values.size())}, DType::i32).to(Device::cuda);
  }
  const LlamaCuda& model_;
  int page_size_;
  PagedKv kv_;
};
#endif

// The index of the largest logit of row `row` of f32 [rows, vocab]; the first on ties.
inline std::int32_t argmax_row(const Tensor& logits, std::int64_t row) {
  const std::int64_t vocab = logits.size(1);
  const float* values = logits.data<float>() + row * vocab;
  return static_cast<std::int32_t>(std::max_element(values, values + vocab) - values);
}

// Greedy continuations (new_tokens each) of prefix + suffixes[b] for every b, decoded as one
// batch in `mode`: the prefix prefilled as a segment, then every suffix (>= 1 token each) in
// one step, causal, then one token per sequence per step. prompt_logits, where given, gets the
// logits of every prompt position: the prefix's rows, then each suffix's, [P + sum |suffix|, vocab].
inline std::vector<std::vector<std::int32_t>> paged_greedy(PagedStepper& stepper, AttentionMode mode,
                                                           std::span<const std::int32_t> prefix,
                                                           const std::vector<std::vector<std::int32_t>>& suffixes,
                                                           std::int64_t new_tokens, Tensor* prompt_logits = nullptr) {
  const int ps = stepper.page_size();
  const bool dense = mode == AttentionMode::dense, shared = !dense && !prefix.empty();
  const auto p = static_cast<std::int64_t>(prefix.size()), batch = static_cast<std::int64_t>(suffixes.size());
  auto pages_for = [ps](std::int64_t tokens) { return (tokens + ps - 1) / ps; };
  auto page_list = [](std::int64_t first, std::int64_t count) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(first + i);
    return ids;
  };
  // The prefix on pages [0, ...), then each sequence's own pages: room for its prefix copy
  // (dense), its suffix and its new tokens.
  std::vector<std::int64_t> first_page(static_cast<std::size_t>(batch)), own(static_cast<std::size_t>(batch), 0);
  std::int64_t pages = pages_for(p);
  for (std::int64_t b = 0; b < batch; ++b) {
    HG_CHECK(!suffixes[b].empty(), "paged_greedy: suffix ", b, " is empty");
    first_page[b] = pages;
    pages += pages_for((dense ? p : 0) + static_cast<std::int64_t>(suffixes[b].size()) + new_tokens);
  }
  stepper.allocate(pages + 1);
  plan::PlanOptions options = stepper.plan_options(mode);
  if (mode == AttentionMode::hydragen)  // stack the prefix whatever its size and readers
    options.min_sharers_to_stack = 1, options.min_segment_tokens_to_stack = 1, options.fold_when_stacking_saves_little = false;
  std::vector<Tensor> logits_rows;
  auto empty_layout = [&] {
    const ModelConfig& c = stepper.config();
    plan::PagedLayout layout;
    layout.page_size = ps, layout.kv_heads = static_cast<int>(c.num_kv_heads);
    layout.q_heads = static_cast<int>(c.num_heads), layout.head_dim = static_cast<int>(c.head_dim);
    return layout;
  };

  if (p > 0) {  // the prefix's prefill: it is the step's one sequence
    StepRows rows;
    rows.tokens.assign(prefix.begin(), prefix.end());
    for (std::int32_t i = 0; i < p; ++i) rows.positions.push_back(i), rows.slots.push_back(i);
    plan::PagedLayout layout = empty_layout();
    layout.sequences.push_back({kNoParent, p, page_list(0, pages_for(p)), static_cast<int>(p)});
    logits_rows.push_back(stepper.step(rows, plan::build_attention_plan(layout, options)));
    if (dense) {  // each sequence's own copy of the prefix
      std::vector<std::int32_t> src, dst;
      for (std::int64_t b = 0; b < batch; ++b) {
        for (std::int32_t i = 0; i < p; ++i) src.push_back(i), dst.push_back(static_cast<std::int32_t>(first_page[b] * ps + i));
        own[b] = p;
      }
      stepper.copy_slots(src, dst);
    }
  }
  // One step of `tokens[b]` for every sequence b; returns the logits of its rows.
  auto step = [&](const std::vector<std::vector<std::int32_t>>& tokens) {
    StepRows rows;
    plan::PagedLayout layout = empty_layout();
    if (shared) layout.segments.push_back({kNoParent, p, page_list(0, pages_for(p)), 0});
    for (std::int64_t b = 0; b < batch; ++b) {
      const auto n = static_cast<std::int64_t>(tokens[b].size());
      for (std::int64_t i = 0; i < n; ++i) {
        rows.tokens.push_back(tokens[b][i]);
        rows.positions.push_back(static_cast<std::int32_t>((shared ? p : 0) + own[b] + i));
        rows.slots.push_back(static_cast<std::int32_t>(first_page[b] * ps + own[b] + i));
      }
      own[b] += n;
      layout.sequences.push_back({shared ? 0 : kNoParent, own[b], page_list(first_page[b], pages_for(own[b])),
                                  static_cast<int>(n)});
    }
    const plan::AttentionPlan plan = plan::build_attention_plan(layout, options);
    HG_CHECK(plan.stacked_segments == (shared && mode == AttentionMode::hydragen ? 1 : 0),
             "paged_greedy: the ", mode_name(mode), " plan stacks ", plan.stacked_segments, " segments");
    return stepper.step(rows, plan);
  };
  // The suffixes' step makes the first new token, each decode step one more.
  std::vector<std::vector<std::int32_t>> generated(static_cast<std::size_t>(batch)), next = suffixes;
  for (std::int64_t t = 0; t == 0 || t < new_tokens; ++t) {
    const Tensor logits = step(next);
    if (t == 0) logits_rows.push_back(logits);
    std::int64_t row = 0;
    for (std::int64_t b = 0; b < batch; ++b) {
      row += static_cast<std::int64_t>(next[b].size());
      next[b] = {argmax_row(logits, row - 1)};
      if (new_tokens > 0) generated[b].push_back(next[b][0]);
    }
  }
  if (prompt_logits != nullptr) {
    std::int64_t total = 0;
    for (const Tensor& l : logits_rows) total += l.size(0);
    *prompt_logits = Tensor::empty({total, stepper.config().vocab_size}, DType::f32);
    std::int64_t at = 0;
    for (const Tensor& l : logits_rows) {
      prompt_logits->slice(0, at, at + l.size(0)).copy_from(l);
      at += l.size(0);
    }
  }
  return generated;
}

// One prompt: its first half the shared prefix, the rest its own tokens.
inline std::vector<std::int32_t> paged_greedy(PagedStepper& stepper, AttentionMode mode,
                                              std::span<const std::int32_t> prompt, std::int64_t new_tokens,
                                              Tensor* prompt_logits = nullptr) {
  const std::size_t half = prompt.size() / 2;
  const std::vector<std::vector<std::int32_t>> suffix{{prompt.begin() + half, prompt.end()}};
  return paged_greedy(stepper, mode, prompt.first(half), suffix, new_tokens, prompt_logits)[0];
}

// Logits f32 [tokens, vocab] at every position of one prompt (split as above).
inline Tensor paged_logits(PagedStepper& stepper, AttentionMode mode, std::span<const std::int32_t> prompt) {
  Tensor logits;
  paged_greedy(stepper, mode, prompt, 0, &logits);
  return logits;
}

}  // namespace hydragen::test
