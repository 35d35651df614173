#include "engine/step_builder.h"

#include <unordered_map>

#include "hydragen/error.h"

namespace hydragen::engine {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// A step's PagedLayout under construction: tree nodes become segments on first use, their
// ancestors before them. Decode rows and prefill chunks get segments of their own, so that
// only the prefill ones are always stacked.
class LayoutBuilder {
 public:
  LayoutBuilder(const kv::RadixTree& tree, const ModelConfig& config) : tree_(tree) {
    layout.page_size = tree.pool().page_size();
    layout.kv_heads = static_cast<int>(config.num_kv_heads);
    layout.q_heads = static_cast<int>(config.num_heads);
    layout.head_dim = static_cast<int>(config.head_dim);
  }

  // The segment index of node `id` (kNoParent for the root or no node).
  int segment(kv::NodeId id, bool prefill) {
    if (id == kv::kRoot || id < 0) return kNoParent;
    auto& known = segment_of_[prefill];
    if (auto it = known.find(id); it != known.end()) return it->second;
    const kv::RadixNode& node = tree_.node(id);
    plan::PagedLayout::SegmentPages seg;
    seg.parent = segment(node.parent, prefill);
    seg.tokens = static_cast<std::int64_t>(node.tokens.size());
    seg.pages = node.pages;
    seg.first_slot = node.first_slot;
    seg.always_stack = prefill;
    return known[id] = push(std::move(seg));
  }

  // A prefill chunk: its run of pages so far (the chunk included: its K/V is written before
  // attention) as a segment, read causally by a pseudo-sequence holding the chunk's rows.
  void chunk(int parent, const std::vector<std::int32_t>& pages, int first_slot, std::int64_t tokens_so_far,
             std::int64_t rows, kv::NodeId completes) {
    plan::PagedLayout::SegmentPages self;
    self.parent = parent;
    self.tokens = tokens_so_far;
    self.first_slot = first_slot;
    self.pages.assign(pages.begin(), pages.begin() + ceil_div(first_slot + tokens_so_far, layout.page_size));
    self.always_stack = true;
    const int index = push(std::move(self));
    if (completes >= 0) segment_of_[true][completes] = index;  // children of the node read it whole
    plan::PagedLayout::SequencePages seq;
    seq.parent = index;
    seq.query_tokens = static_cast<int>(rows);
    layout.sequences.push_back(std::move(seq));
  }

  plan::PagedLayout layout;

 private:
  int push(plan::PagedLayout::SegmentPages seg) {
    layout.segments.push_back(std::move(seg));
    return static_cast<int>(layout.segments.size()) - 1;
  }

  const kv::RadixTree& tree_;
  std::unordered_map<kv::NodeId, int> segment_of_[2];  // decode, prefill
};

// Decode row t of `seq`: the inputs the runner reads and the sampling of its token, with its
// penalty history (the tokens before row t's input: those collected, as at most the row
// before it is in flight).
void add_decode_row(Sequence& seq, int page_size, StepRows& rows, StepSampling& sampling) {
  const std::int64_t t = seq.next_row(), own = seq.own_prompt() + t;
  rows.tokens.push_back(seq.in_flight > 0 ? 0 : seq.own_token(own));  // (fed: the runner takes it)
  rows.positions.push_back(static_cast<std::int32_t>(seq.tree_tokens + t));
  rows.slots.push_back(slot_of(seq.pages, 0, own, page_size));
  sampling.params.push_back(seq.params);
  if (!seq.request->forced_tokens.empty())  // scoring: the continuation's token t, not a draw
    sampling.params.back().forced_token = seq.request->forced_tokens[static_cast<std::size_t>(t)];
  sampling.steps.push_back(static_cast<std::uint64_t>(t));
  seq.penalty_tokens.append_row(seq.params, seq.request->prompt, seq.completion.tokens, sampling.steps.back(),
                                sampling.history);
}

}  // namespace

StepWork build_step(const ScheduledStep& scheduled, const kv::RadixTree& tree, const ModelConfig& config,
                    const plan::PlanOptions* plan_options, ContextTokens& context) {
  const int ps = tree.pool().page_size();
  LayoutBuilder builder(tree, config);
  StepWork step;
  step.fed_from = scheduled.fed_from;
  for (Sequence* seq : scheduled.decode) {
    plan::PagedLayout::SequencePages pages;
    pages.parent = builder.segment(seq->leaf, false);
    pages.suffix_tokens = seq->own_prompt() + seq->next_row() + 1;
    HG_CHECK(ceil_div(pages.suffix_tokens, ps) <= static_cast<std::int64_t>(seq->pages.size()),
             "build_step: a decode row past its sequence's pages");
    pages.pages.assign(seq->pages.begin(), seq->pages.begin() + ceil_div(pages.suffix_tokens, ps));
    builder.layout.sequences.push_back(std::move(pages));
    add_decode_row(*seq, ps, step.rows, step.sampling);
    context.stored += seq->own_prompt() + seq->next_row() + 1;
    context.per_sequence += seq->tree_tokens + seq->next_row() + 1;
  }
  for (const plan::PagedLayout::SegmentPages& seg : builder.layout.segments) context.stored += seg.tokens;

  for (const PrefillChunk& chunk : scheduled.prefill) {
    const std::int64_t end = chunk.begin + chunk.tokens;
    if (chunk.node >= 0) {
      const kv::RadixNode& node = tree.node(chunk.node);
      const bool completes = end == static_cast<std::int64_t>(node.tokens.size());
      builder.chunk(builder.segment(node.parent, true), node.pages, node.first_slot, end, chunk.tokens,
                    completes ? chunk.node : -1);
      for (std::int64_t i = chunk.begin; i < end; ++i) {
        step.rows.tokens.push_back(node.tokens[static_cast<std::size_t>(i)]);
        step.rows.positions.push_back(static_cast<std::int32_t>(node.depth_tokens + i));
        step.rows.slots.push_back(slot_of(node.pages, node.first_slot, i, ps));
      }
    } else {
      const Sequence& seq = *chunk.own;
      builder.chunk(builder.segment(seq.leaf, true), seq.pages, 0, end, chunk.tokens, -1);
      for (std::int64_t i = chunk.begin; i < end; ++i) {
        step.rows.tokens.push_back(seq.own_token(i));
        step.rows.positions.push_back(static_cast<std::int32_t>(seq.position_of_own(i)));
        step.rows.slots.push_back(slot_of(seq.pages, 0, i, ps));
      }
    }
  }
  if (plan_options != nullptr) step.plan = plan::build_attention_plan(builder.layout, *plan_options);
  return step;
}

}  // namespace hydragen::engine
