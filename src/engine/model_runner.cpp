// The host runners' launch and collect (the step runs at once), and the K/V pool's size
// (model_runner.h).
#include "engine/model_runner.h"

#include <algorithm>
#include <limits>

#include "hydragen/error.h"

namespace hydragen::engine {

std::int64_t pages_for_bytes(std::int64_t bytes, int page_size, std::int64_t bytes_per_token) {
  return std::max<std::int64_t>(1, bytes / (std::int64_t{page_size} * bytes_per_token));
}

std::int64_t kv_pool_pages(const RunnerOptions& options, std::int64_t bytes_per_token, std::int64_t free_bytes,
                           std::int64_t reserve_bytes) {
  HG_CHECK(options.page_size > 0 && bytes_per_token > 0, "kv_pool_pages: page size ", options.page_size,
           " and bytes per token ", bytes_per_token, " must be positive");
  auto mib = [](std::int64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; };
  const bool device = free_bytes >= 0;
  const std::int64_t usable = device ? free_bytes - reserve_bytes : 0;
  std::int64_t pages = options.kv_pages;
  if (pages <= 0) {
    std::int64_t budget = options.kv_memory_bytes;
    if (budget > 0) {
      HG_CHECK(!device || budget <= usable, "--kv-memory: ", mib(budget), " asked for the K/V pool, but the device has ",
               mib(free_bytes), " free after the weights, ", mib(reserve_bytes),
               " of it kept for workspaces: at most ", mib(std::max<std::int64_t>(usable, 0)));
    } else if (device) {
      HG_CHECK(usable >= std::int64_t{options.page_size} * bytes_per_token, "the device has ", mib(free_bytes),
               " free after the weights, and ", mib(reserve_bytes),
               " of it is kept for workspaces: no room for a K/V pool (a smaller model, or a GPU with more memory)");
      budget = usable;
    } else {
      budget = kCpuKvBytes;
    }
    pages = pages_for_bytes(budget, options.page_size, bytes_per_token);
  }
  // Slots are int32 in the plans and step rows; the runner adds one sink page.
  const std::int64_t max_pages = std::numeric_limits<std::int32_t>::max() / options.page_size - 1;
  return std::min(pages, max_pages);
}

void HostModelRunner::launch(const StepWork& step) {
  HG_CHECK(launched_.size() < 2, "ModelRunner::launch: two steps in flight already");
  const StepRows* rows = &step.rows;
  StepRows fed;
  if (!step.fed_from.empty()) {
    HG_CHECK(!launched_.empty(), "ModelRunner::launch: fed_from needs the step launched last in flight");
    fed = step.rows;
    for (std::size_t r = 0; r < step.fed_from.size(); ++r) {
      const std::int32_t from = step.fed_from[r];
      HG_CHECK(from >= 0 && static_cast<std::size_t>(from) < last_tokens_.size(), "ModelRunner::launch: fed_from[",
               r, "] = ", from, " is not a sampled row of the last step (", last_tokens_.size(), " rows)");
      fed.tokens[r] = last_tokens_[static_cast<std::size_t>(from)];
    }
    rows = &fed;
  }
  HG_CHECK(step.sampling.size() <= rows->size() && step.sampling.steps.size() == step.sampling.params.size() &&
               static_cast<std::int64_t>(step.fed_from.size()) <= step.sampling.size(),
           "ModelRunner::launch: ", step.sampling.size(), " sampled rows and ", step.fed_from.size(),
           " fed rows for ", rows->size(), " rows (sampled rows <= rows, fed rows <= sampled rows)");
  launched_.push_back(compute(*rows, step.plan ? &*step.plan : nullptr, step.sampling));
  last_tokens_ = launched_.back().tokens;
}

SampledTokens HostModelRunner::collect() {
  HG_CHECK(!launched_.empty(), "ModelRunner::collect: no step in flight");
  SampledTokens out = std::move(launched_.front());
  launched_.pop_front();
  return out;
}

}  // namespace hydragen::engine
