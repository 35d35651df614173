#include "engine/prefill.h"

#include <algorithm>

#include "hydragen/error.h"

namespace hydragen::engine {

namespace {

std::vector<kv::NodeId> path_of(const Sequence& seq, const kv::RadixTree& tree) {
  return seq.leaf >= 0 && !seq.prompt_copied ? tree.path_to(seq.leaf) : std::vector<kv::NodeId>{};
}

std::int64_t unfilled(const kv::RadixNode& node) {
  return static_cast<std::int64_t>(node.tokens.size()) - node.filled_tokens;
}

}  // namespace

std::int64_t prefill_backlog(const Sequence& seq, const kv::RadixTree& tree, std::unordered_set<kv::NodeId>& counted) {
  std::int64_t tokens = seq.own_target() - std::max(seq.own_filled, seq.own_prompt());
  for (kv::NodeId id : path_of(seq, tree))
    if (counted.insert(id).second) tokens += unfilled(tree.node(id));
  return tokens;
}

bool tree_path_filled(const Sequence& seq, const kv::RadixTree& tree) {
  for (kv::NodeId id : path_of(seq, tree))
    if (!tree.node(id).filled) return false;
  return true;
}

void copy_unshared_prompt(Sequence& seq, kv::RadixTree& tree, std::vector<std::int32_t>& src,
                          std::vector<std::int32_t>& dst) {
  HG_CHECK(!seq.prompt_copied && tree_path_filled(seq, tree), "copy_unshared_prompt: the tree path must be filled");
  const int ps = tree.pool().page_size();
  const std::vector<kv::NodeId> path = tree.path_to(seq.leaf);
  kv::NodeId boundary = -1;
  std::int64_t at = 0;
  for (kv::NodeId id : path) {
    const kv::RadixNode& node = tree.node(id);
    if (node.depth_tokens + static_cast<std::int64_t>(node.tokens.size()) == seq.shared_tokens) boundary = id;
    for (std::size_t i = 0; i < node.tokens.size(); ++i, ++at) {
      if (at < seq.shared_tokens) continue;
      src.push_back(slot_of(node.pages, node.first_slot, static_cast<std::int64_t>(i), ps));
      dst.push_back(slot_of(seq.pages, 0, at - seq.shared_tokens, ps));
    }
  }
  HG_CHECK(seq.shared_tokens == 0 || boundary >= 0, "Engine: no tree node ends where sharing ends");
  if (boundary >= 0) tree.lock(tree.path_to(boundary));
  tree.unlock(path);
  seq.leaf = boundary;
  seq.prompt_copied = true;
  seq.own_filled = seq.own_prompt();
}

bool take_prefill_chunks(Sequence& seq, kv::RadixTree& tree, std::int64_t& budget, std::vector<PrefillChunk>& out) {
  for (kv::NodeId id : path_of(seq, tree)) {
    const kv::RadixNode& node = tree.node(id);
    if (node.filled) continue;
    const std::int64_t take = std::min(unfilled(node), budget);
    if (take <= 0) return false;
    out.push_back({id, nullptr, node.filled_tokens, take});
    tree.set_filled_tokens(id, node.filled_tokens + take);
    budget -= take;
    if (!node.filled) return false;
  }
  if (!seq.prompt_copied) {
    if (seq.own_prompt() > 0) return false;  // copied by the next step's schedule, after this one
    seq.prompt_copied = true;
  }
  const std::int64_t take = std::min(seq.own_target() - seq.own_filled, budget);
  if (take > 0) {
    out.push_back({-1, &seq, seq.own_filled, take});
    seq.own_filled += take;
    budget -= take;
  }
  return seq.own_filled == seq.own_target();
}

}  // namespace hydragen::engine
