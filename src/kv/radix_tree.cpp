#include "kv/radix_tree.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

#include "hydragen/error.h"

namespace hydragen::kv {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

RadixTree::RadixTree(PagePool& pool) : pool_(pool) {
  slots_.emplace_back();
  slots_[kRoot].live = true;
  slots_[kRoot].node.filled = true;  // the empty prefix is always available
}

RadixTree::~RadixTree() {
  for (const Slot& slot : slots_) {
    if (slot.live) pool_.release(slot.node.pages);
  }
}

void RadixTree::check_live(NodeId id, const char* what) const {
  HG_CHECK(id >= 0 && id < static_cast<NodeId>(slots_.size()) && slots_[id].live, "RadixTree::",
           what, ": node id must name a live node, got ", id);
}

void RadixTree::check_path(std::span<const NodeId> path, const char* what) const {
  NodeId parent = kRoot;
  for (std::size_t i = 0; i < path.size(); ++i) {
    HG_CHECK(path[i] != kRoot, "RadixTree::", what, ": path must exclude kRoot, got it at ", i);
    check_live(path[i], what);
    HG_CHECK(slots_[path[i]].node.parent == parent, "RadixTree::", what, ": path[", i, "] = ",
             path[i], " must be a child of ", parent, " (a root-first path; after an insert split "
             "a node, re-read a held path with path_to(path.back()))");
    parent = path[i];
  }
}

const RadixNode& RadixTree::node(NodeId id) const {
  check_live(id, "node");
  return slots_[id].node;
}

std::vector<NodeId> RadixTree::path_to(NodeId id) const {
  check_live(id, "path_to");
  std::vector<NodeId> path;
  for (NodeId at = id; at != kRoot; at = slots_[at].node.parent) path.push_back(at);
  std::reverse(path.begin(), path.end());
  return path;
}

std::vector<NodeId> RadixTree::node_ids() const {
  std::vector<NodeId> ids;
  for (NodeId id = 1; id < static_cast<NodeId>(slots_.size()); ++id) {
    if (slots_[id].live) ids.push_back(id);
  }
  return ids;
}

RadixTree::Walk RadixTree::walk(std::span<const std::int32_t> tokens, bool filled_only) const {
  Walk w;
  NodeId at = kRoot;
  while (w.matched < static_cast<std::int64_t>(tokens.size())) {
    const auto& children = slots_[at].children;
    const auto it = children.find(tokens[static_cast<std::size_t>(w.matched)]);
    if (it == children.end()) break;
    const RadixNode& child = slots_[it->second].node;
    if (filled_only && !child.filled) break;
    const auto rest = tokens.subspan(static_cast<std::size_t>(w.matched));
    const auto label_len = static_cast<std::int64_t>(child.tokens.size());
    const auto limit = static_cast<std::size_t>(std::min<std::int64_t>(label_len, rest.size()));
    const auto mismatch = std::mismatch(child.tokens.begin(), child.tokens.begin() + limit, rest.begin());
    const std::int64_t common = mismatch.first - child.tokens.begin();  // >= 1: first tokens agree
    w.path.push_back(it->second);
    w.matched += common;
    w.matched_in_last = common;
    if (common < label_len) break;
    at = it->second;
  }
  return w;
}

RadixTree::Match RadixTree::match(std::span<const std::int32_t> tokens) const {
  Walk w = walk(tokens, /*filled_only=*/true);
  return Match{w.matched, std::move(w.path)};
}

NodeId RadixTree::new_slot() {
  NodeId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<NodeId>(slots_.size());
    slots_.emplace_back();
  }
  slots_[id].live = true;
  ++live_nodes_;
  return id;
}

// Splits node `id` (tokens t[0..L), pages P, first_slot f) at 0 < k < L. The lower part keeps
// the id (so held leaves stay the deepest node of their prompt); the upper part is new.
NodeId RadixTree::split(NodeId id, std::int64_t k) {
  const NodeId upper_id = new_slot();  // may grow slots_: take references after it
  Slot& upper = slots_[upper_id];
  RadixNode& lower = slots_[id].node;
  const int page_size = pool_.page_size();
  const std::int64_t boundary = lower.first_slot + k;  // slot of t[k], counted from pages[0]
  const auto first_lower_page = static_cast<std::size_t>(boundary / page_size);

  upper.node = RadixNode{lower.parent, {lower.tokens.begin(), lower.tokens.begin() + k},
                         {lower.pages.begin(), lower.pages.begin() + ceil_div(boundary, page_size)},
                         lower.first_slot, lower.depth_tokens, std::min(lower.filled_tokens, k),
                         lower.filled_tokens >= k, lower.locks, lower.last_used};
  lower.filled_tokens = std::max<std::int64_t>(0, lower.filled_tokens - k);
  if (boundary % page_size != 0) pool_.retain(lower.pages[first_lower_page]);  // now in both parts

  lower.tokens.erase(lower.tokens.begin(), lower.tokens.begin() + k);
  lower.pages.erase(lower.pages.begin(), lower.pages.begin() + static_cast<std::ptrdiff_t>(first_lower_page));
  lower.first_slot = static_cast<int>(boundary % page_size);
  lower.depth_tokens += k;
  slots_[lower.parent].children[upper.node.tokens.front()] = upper_id;
  lower.parent = upper_id;
  upper.children.emplace(lower.tokens.front(), id);
  return upper_id;
}

std::optional<std::vector<NodeId>> RadixTree::insert(std::span<const std::int32_t> tokens) {
  HG_CHECK(!tokens.empty(), "RadixTree::insert: tokens must hold >= 1 token, got 0");
  Walk w = walk(tokens, /*filled_only=*/false);
  if (!w.path.empty() && w.matched_in_last < static_cast<std::int64_t>(slots_[w.path.back()].node.tokens.size())) {
    w.path.back() = split(w.path.back(), w.matched_in_last);
  }
  const std::int64_t rest = static_cast<std::int64_t>(tokens.size()) - w.matched;
  if (rest > 0) {
    const std::int64_t need = ceil_div(rest, pool_.page_size());
    // Lock the path while making room, so eviction cannot take the prefix we extend.
    for (const NodeId id : w.path) ++slots_[id].node.locks;
    const bool room = make_room(need);
    for (const NodeId id : w.path) --slots_[id].node.locks;
    if (!room) return std::nullopt;
    std::vector<std::int32_t> pages = std::move(*pool_.allocate(need));

    const NodeId parent = w.path.empty() ? kRoot : w.path.back();
    const NodeId id = new_slot();
    Slot& slot = slots_[id];
    slot.node.parent = parent;
    slot.node.tokens.assign(tokens.begin() + w.matched, tokens.end());
    slot.node.pages = std::move(pages);
    slot.node.depth_tokens = w.matched;
    slots_[parent].children.emplace(slot.node.tokens.front(), id);
    cached_tokens_ += rest;
    w.path.push_back(id);
  }
  ++clock_;
  for (const NodeId id : w.path) slots_[id].node.last_used = clock_;
  return std::move(w.path);
}

void RadixTree::set_filled_tokens(NodeId id, std::int64_t tokens) {
  check_live(id, "set_filled_tokens");
  HG_CHECK(id != kRoot, "RadixTree::set_filled_tokens: node id must not be kRoot");
  RadixNode& node = slots_[id].node;
  const auto size = static_cast<std::int64_t>(node.tokens.size());
  HG_CHECK(tokens >= node.filled_tokens && tokens <= size, "RadixTree::set_filled_tokens: node ", id, " has ",
           node.filled_tokens, " of ", size, " tokens filled; ", tokens, " must be in [", node.filled_tokens, ", ",
           size, "]");
  node.filled_tokens = tokens;
  node.filled = tokens == size;
}

void RadixTree::set_filled(NodeId id) {
  check_live(id, "set_filled");
  set_filled_tokens(id, static_cast<std::int64_t>(slots_[id].node.tokens.size()));
}

RadixTree::PageUse RadixTree::page_use() const {
  // A page at a split boundary is listed by two nodes: it counts as locked if either is.
  std::unordered_map<std::int32_t, int> holders;  // page -> most locks of a node listing it
  for (NodeId id = 1; id < static_cast<NodeId>(slots_.size()); ++id) {
    if (!slots_[id].live) continue;
    for (const std::int32_t page : slots_[id].node.pages) {
      int& locks = holders.try_emplace(page, 0).first->second;
      locks = std::max(locks, slots_[id].node.locks);
    }
  }
  PageUse use;
  for (const auto& [page, locks] : holders) {
    use.locked += locks > 0;
    use.shared += locks > 1;
    use.cached += locks == 0;
  }
  return use;
}

void RadixTree::lock(std::span<const NodeId> path) {
  check_path(path, "lock");
  ++clock_;
  for (const NodeId id : path) {
    ++slots_[id].node.locks;
    slots_[id].node.last_used = clock_;
  }
}

void RadixTree::unlock(std::span<const NodeId> path) {
  check_path(path, "unlock");
  for (const NodeId id : path) {
    HG_CHECK(slots_[id].node.locks > 0, "RadixTree::unlock: node ", id,
             " is not locked (its lock count would go below 0)");
  }
  for (const NodeId id : path) --slots_[id].node.locks;
}

bool RadixTree::evictable(NodeId id) const {
  const Slot& slot = slots_[id];
  return id != kRoot && slot.live && slot.children.empty() && slot.node.locks == 0;
}

void RadixTree::evict(NodeId leaf) {
  Slot& slot = slots_[leaf];
  pool_.release(slot.node.pages);
  slots_[slot.node.parent].children.erase(slot.node.tokens.front());
  cached_tokens_ -= static_cast<std::int64_t>(slot.node.tokens.size());
  --live_nodes_;
  slot = Slot{};
  free_ids_.push_back(leaf);
}

// Evicts unlocked leaves in LRU order until goal() holds or none is left; returns goal().
// The candidate heap is built per call: eviction only runs when the pool is short, and a
// scan of the nodes is cheap next to the prefill that follows.
template <class Goal>
bool RadixTree::evict_lru_until(Goal goal) {
  if (goal()) return true;
  using Candidate = std::pair<std::uint64_t, NodeId>;  // (last_used, id): oldest first
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  for (NodeId id = 1; id < static_cast<NodeId>(slots_.size()); ++id) {
    if (evictable(id)) heap.emplace(slots_[id].node.last_used, id);
  }
  while (!goal() && !heap.empty()) {
    const NodeId leaf = heap.top().second;
    heap.pop();
    const NodeId parent = slots_[leaf].node.parent;
    evict(leaf);
    if (evictable(parent)) heap.emplace(slots_[parent].node.last_used, parent);
  }
  return goal();
}

bool RadixTree::make_room(std::int64_t pages) {
  HG_CHECK(pages >= 0, "RadixTree::make_room: pages must be >= 0, got ", pages);
  if (pages > pool_.num_pages()) return false;
  return evict_lru_until([&] { return pool_.free_pages() >= pages; });
}

void RadixTree::evict_all_unlocked() {
  evict_lru_until([] { return false; });
}

}  // namespace hydragen::kv
