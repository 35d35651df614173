// Sequence: one generation stream (one sample of a request) and where its K/V lives.
//
// A prompt of L tokens: its first L - 1 tokens live in the radix tree (shared with every
// prompt that starts the same way); the sequence reads the first `shared_tokens` of them
// from the tree and holds the rest, copied, at the start of its own pages (dense: all of
// them; GenerationRequest::max_shared_tokens: the one-level baseline). Decode row t feeds
// prompt[L-1] (t = 0) or generated token t-1 at position L-1+t and writes its K/V to own slot
// own_prompt() + t; a fully cached prompt still yields its next-token logits.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "kv/radix_tree.h"
#include "sample/token_history.h"

namespace hydragen::engine {

enum class SequenceState {
  waiting,     // holds nothing; in the scheduler's queue (first come, first served)
  prefilling,  // its tree path locked and own pages taken; tree nodes, its prompt copy or
               // its own tokens (after a preemption) still to compute
  decoding,    // in the decode batch
  finished,    // its completion is final; kept only while a step in flight holds a row of it
};

struct Sequence {
  std::shared_ptr<const GenerationRequest> request;
  Completion completion;  // request id and sample set at submission; tokens as collected
  sample::SamplingParams params;  // the request's, seed + sample
  sample::HeldTokens penalty_tokens;  // its tokens counted for the penalties (build_step)
  std::uint64_t arrival = 0;      // submission order: first come, first served, also after a preemption
  SequenceState state = SequenceState::waiting;
  bool cancel = false;  // Engine::cancel: finished at the next step

  // The tree: `leaf` is the node whose root path this sequence holds locked (-1: none): the
  // deepest node of its prompt while prefilling, then the node where its sharing ends.
  kv::NodeId leaf = -1;
  std::int64_t tree_tokens = 0;    // L - 1
  std::int64_t shared_tokens = 0;  // of those, read from the tree
  bool prompt_copied = false;      // its unshared prompt part is in its own pages (or it has none)

  std::vector<std::int32_t> pages;  // own pages
  std::int64_t own_filled = 0;      // own slots whose K/V a launched step writes (prefilling)

  // Rows in flight: `epoch` changes whenever it leaves the batch (finished, preempted), so a
  // row launched before is dropped when collected. `held`: rows in flight of any epoch.
  std::uint32_t epoch = 0;
  int in_flight = 0;  // rows of this epoch launched and not collected
  int held = 0;
  bool in_step = false;  // the scheduler's mark while it orders a step's rows

  std::int64_t prompt_tokens() const { return tree_tokens + 1; }
  std::int64_t own_prompt() const { return tree_tokens - shared_tokens; }
  std::int64_t generated() const { return static_cast<std::int64_t>(completion.tokens.size()); }
  // The decode row launched next: its index t (and sampling step), its position and own slot.
  std::int64_t next_row() const { return generated() + in_flight; }
  // Own slots that K/V must be computed for before it decodes (after a preemption: the
  // prompt's last token and every generated token but the last).
  std::int64_t own_target() const { return own_prompt() + generated(); }
  // The input token of own slot i >= own_prompt() (the K/V it holds is that token's).
  std::int32_t own_token(std::int64_t i) const {
    const std::int64_t t = i - own_prompt();
    return t == 0 ? request->prompt.back() : completion.tokens[static_cast<std::size_t>(t - 1)];
  }
  std::int64_t position_of_own(std::int64_t i) const { return shared_tokens + i; }
  bool rows_left() const { return next_row() < request->max_new_tokens; }
};

}  // namespace hydragen::engine
