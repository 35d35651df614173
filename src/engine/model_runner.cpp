// ModelRunner's default overlapped decode: the step runs at once (model_runner.h).
#include "engine/model_runner.h"

#include "hydragen/error.h"

namespace hydragen::engine {

void ModelRunner::launch_decode(const StepRows& rows, const attn::AttentionPlan* plan, const StepSampling& sampling,
                                bool tokens_from_last) {
  HG_CHECK(launched_.size() < 2, "ModelRunner::launch_decode: two steps in flight already");
  const StepRows* input = &rows;
  StepRows fed;
  if (tokens_from_last) {
    HG_CHECK(!launched_.empty() && static_cast<std::int64_t>(launched_.back().tokens.size()) == rows.size(),
             "ModelRunner::launch_decode: tokens_from_last needs the step before in flight with as many rows (",
             launched_.empty() ? 0 : launched_.back().tokens.size(), " for ", rows.size(), ")");
    fed = rows;
    fed.tokens = launched_.back().tokens;
    input = &fed;
  }
  launched_.push_back(step(*input, plan, &sampling, {}, false));
}

SampledTokens ModelRunner::collect_decode() {
  HG_CHECK(!launched_.empty(), "ModelRunner::collect_decode: no step in flight");
  SampledTokens out = std::move(launched_.front());
  launched_.pop_front();
  return out;
}

}  // namespace hydragen::engine
