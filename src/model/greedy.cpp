#include "model/greedy.h"

#include "hydragen/error.h"

namespace hydragen {

std::int32_t argmax_row(const Tensor& logits, std::int64_t row) {
  HG_CHECK(logits.rank() == 2 && logits.dtype() == DType::f32 && logits.is_contiguous() && row >= 0 &&
               row < logits.size(0),
           "argmax_row: row ", row, " of logits ", logits.shape_str(), " (f32 [rows, vocab])");
  const std::int64_t vocab = logits.size(1);
  const float* values = logits.data<float>() + row * vocab;
  std::int64_t best = 0;
  for (std::int64_t i = 1; i < vocab; ++i) {
    if (values[i] > values[best]) best = i;
  }
  return static_cast<std::int32_t>(best);
}

std::vector<std::vector<std::int32_t>> greedy_shared_prefix(const Llama& model, std::span<const std::int32_t> prefix,
                                                            const std::vector<std::vector<std::int32_t>>& suffixes,
                                                            std::int64_t new_tokens, AttentionMode mode,
                                                            const std::function<void(std::size_t, std::int32_t)>& on_token) {
  HG_CHECK(new_tokens >= 0, "greedy: new_tokens must be >= 0, got ", new_tokens);
  HG_CHECK(!suffixes.empty(), "greedy: no sequences");
  const std::size_t batch_size = suffixes.size();
  KvCache shared = model.new_cache();
  std::vector<KvCache> caches;
  for (std::size_t b = 0; b < batch_size; ++b) caches.push_back(model.new_cache());

  ForwardBatch batch;
  std::vector<std::vector<std::int32_t>> pending(batch_size);  // the tokens of the next step
  for (std::size_t b = 0; b < batch_size; ++b) pending[b] = suffixes[b];
  if (!prefix.empty()) {
    ForwardBatch prefill;
    prefill.sequences.push_back(ForwardSequence{prefix, &shared, -1});
    const Tensor prefix_logits = model.forward(prefill);
    batch.prefixes.push_back(&shared);
    // A sequence with no suffix of its own continues from the prefix's last logits.
    for (std::size_t b = 0; b < batch_size; ++b) {
      if (pending[b].empty()) pending[b] = {argmax_row(prefix_logits, 0)};
    }
  }
  std::vector<std::vector<std::int32_t>> generated(batch_size);
  for (std::size_t b = 0; b < batch_size; ++b) {
    HG_CHECK(!pending[b].empty(), "greedy: sequence ", b, " has neither prefix nor prompt tokens");
    if (suffixes[b].empty() && new_tokens > 0) {
      generated[b] = pending[b];  // already the first new token
      if (on_token) on_token(b, pending[b][0]);
    }
  }
  while (true) {
    bool done = true;
    for (std::size_t b = 0; b < batch_size; ++b) done &= static_cast<std::int64_t>(generated[b].size()) >= new_tokens;
    if (done) break;
    batch.sequences.clear();
    for (std::size_t b = 0; b < batch_size; ++b) {
      batch.sequences.push_back(ForwardSequence{pending[b], &caches[b], prefix.empty() ? -1 : 0});
    }
    const Tensor logits = model.forward(batch, ForwardOptions{mode, false});
    for (std::size_t b = 0; b < batch_size; ++b) {
      const std::int32_t next = argmax_row(logits, static_cast<std::int64_t>(b));
      generated[b].push_back(next);
      if (on_token && static_cast<std::int64_t>(generated[b].size()) <= new_tokens) on_token(b, next);
      pending[b] = {next};
    }
  }
  for (auto& tokens : generated) tokens.resize(static_cast<std::size_t>(new_tokens));
  return generated;
}

std::vector<std::int32_t> greedy(const Llama& model, std::span<const std::int32_t> prompt, std::int64_t new_tokens,
                                 AttentionMode mode, const TokenCallback& on_token) {
  HG_CHECK(!prompt.empty(), "greedy: the prompt is empty");
  const auto forward = [&](std::size_t, std::int32_t token) { if (on_token) on_token(token); };
  return greedy_shared_prefix(model, {}, {std::vector<std::int32_t>(prompt.begin(), prompt.end())}, new_tokens,
                              mode, forward)[0];
}

}  // namespace hydragen
