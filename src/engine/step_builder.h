// A scheduled step as the runner takes it: its rows (the decode rows first, then the prefill
// chunks'), one sampling entry per decode row, and the attention plan over the page pool.
// Decode rows read the tree by the attention mode's rules; prefill chunks read theirs as
// stacked segments (PagedLayout::SegmentPages::always_stack) in every mode.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_runner.h"
#include "engine/prefill.h"
#include "engine/sequence.h"
#include "kv/radix_tree.h"

namespace hydragen::engine {

// What the step holds: the decode rows' sequences in row order (rows [0, fed_from.size())
// fed from the step in flight) and the prefill chunks. Before it: slot copies to run (prompt
// copies, prefill.h) and sequences refused (the pool can never hold them) for the engine to fail.
struct ScheduledStep {
  std::vector<Sequence*> decode;
  std::vector<std::int32_t> fed_from;
  std::vector<PrefillChunk> prefill;
  std::vector<std::int32_t> copy_src, copy_dst;
  std::vector<Sequence*> refused;
  bool empty() const { return decode.empty() && prefill.empty(); }
};

// K/V tokens of the step's decode rows: stored once (tree segments read + own slots) and as if
// each sequence stored its whole context.
struct ContextTokens {
  std::int64_t stored = 0, per_sequence = 0;
};

// plan_options: the runner's for the attention mode (none: no plan).
StepWork build_step(const ScheduledStep& scheduled, const kv::RadixTree& tree, const ModelConfig& config,
                    const plan::PlanOptions* plan_options, ContextTokens& context);

}  // namespace hydragen::engine
