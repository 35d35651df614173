// RadixTree: the prefix cache. A radix tree over int32 token ids; each node is a segment
// of tokens whose K/V is stored once, in pages of a PagePool. The engine inserts a prompt,
// locks the returned path, prefills the nodes that are not filled yet, and reads the path's
// pages as the segments of its sharing tree.
//
// Contract (who owns what):
// - The tree owns one pool reference for every page a node lists, and releases it when the
//   node is evicted or the tree is destroyed. The pool must outlive the tree.
// - A node's pages cover its token slots [first_slot, first_slot + tokens.size()). A node
//   created by insert starts on fresh pages at slot 0. Splitting a node inside a page leaves
//   that boundary page in both parts; each part holds its own reference to it.
// - A locked node (locks > 0) is never evicted. Lock a path right after insert: an unlocked
//   node, even one just inserted, may be evicted by the next insert or make_room.
// - Node ids: a live node's id never changes. Ids of evicted nodes are reused (LIFO), which
//   cannot happen to a node while it is locked.
// - Prefill progress: a node's first filled_tokens tokens have K/V. A split divides it
//   between the parts, so a prompt may share a node that is still being prefilled.
// - Splits: insert may split a node N at k tokens. N's id stays with the LOWER part
//   (tokens [k, L), its children, the tail pages); a new node with a new id takes the upper
//   part and becomes N's parent. So a held path that went through N is stale (it misses
//   the new node above N), but its last node is still the deepest node of that prompt:
//   re-read the path with path_to(held.back()) before using its tokens or pages or
//   unlocking it. lock/unlock reject a stale path (each node must be the child of the one
//   before it, the first a child of the root).
// - Eviction is LRU over unlocked leaves; last_used is a logical clock bumped once per
//   insert or lock call on every node of that path.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/page_pool.h"

namespace hydragen::kv {

using NodeId = std::int32_t;
inline constexpr NodeId kRoot = 0;  // the root holds no tokens and is never evicted

// Read-only view of a node for the engine.
struct RadixNode {
  NodeId parent = -1;                 // kRoot's parent is -1
  std::vector<std::int32_t> tokens;   // the edge label (>= 1 token except the root)
  std::vector<std::int32_t> pages;    // ceil((first_slot + tokens.size()) / page_size) ids
  int first_slot = 0;                 // offset of tokens[0] inside pages[0]
  std::int64_t depth_tokens = 0;      // tokens on the path above: tokens[0]'s context position
  std::int64_t filled_tokens = 0;     // tokens[0, filled_tokens) have K/V (the engine prefills in chunks)
  bool filled = false;                // filled_tokens == tokens.size()
  int locks = 0;                      // sequences / prefills using it
  std::uint64_t last_used = 0;        // logical clock of the last insert/lock touching it
};

class RadixTree {
 public:
  explicit RadixTree(PagePool& pool);
  ~RadixTree();  // releases every page it holds
  RadixTree(const RadixTree&) = delete;
  RadixTree& operator=(const RadixTree&) = delete;

  // Inserts `tokens` (>= 1): walks the longest matching path (filled or not), splits the
  // node where the match ends inside it, and creates ONE new node for the unmatched rest
  // (fresh pages, first_slot 0). Returns the path root-first (kRoot excluded) whose tokens
  // concatenate to `tokens` exactly; path.back() is the deepest node. Returns std::nullopt
  // when the new node's pages cannot be allocated even after evicting unlocked LRU leaves
  // (the path itself is protected); then no node is created, though a split may remain
  // (it changes no token, page or lock a path_to reader sees).
  std::optional<std::vector<NodeId>> insert(std::span<const std::int32_t> tokens);

  // The longest prefix of `tokens` stored in FILLED nodes. A match ending inside a node
  // counts its tokens up to there (no split); the path then ends with that node.
  struct Match {
    std::int64_t tokens = 0;
    std::vector<NodeId> path;
  };
  Match match(std::span<const std::int32_t> tokens) const;

  const RadixNode& node(NodeId id) const;  // id must be live (kRoot is)
  // The root-first path (kRoot excluded) ending at a live node; empty for kRoot.
  std::vector<NodeId> path_to(NodeId id) const;
  std::vector<NodeId> node_ids() const;  // live nodes, kRoot excluded, ascending

  // The node's first `tokens` tokens have K/V (0 <= tokens <= its length; never fewer than
  // before); set_filled(id) marks all of them.
  void set_filled_tokens(NodeId id, std::int64_t tokens);
  void set_filled(NodeId id);
  // locks + 1 on each node and touches last_used. `path` is root-first and current (as
  // returned by insert, match or path_to); an empty path is a no-op.
  void lock(std::span<const NodeId> path);
  // locks - 1 on each; throws (changing nothing) when a count would go below 0.
  void unlock(std::span<const NodeId> path);

  // Evicts unlocked leaves, least recently used first (ties: lower id first; a parent that
  // becomes an unlocked leaf is a candidate in turn), until pool.free_pages() >= pages or
  // nothing is evictable; returns whether the goal was met. A goal above pool.num_pages()
  // can never be met and evicts nothing.
  bool make_room(std::int64_t pages);
  void evict_all_unlocked();

  // Pages by who holds them: `locked` by a node some sequence holds (of those, `shared` by a
  // node held twice or more), `cached` by unlocked nodes only (what eviction can free).
  struct PageUse {
    std::int64_t locked = 0, shared = 0, cached = 0;
  };
  PageUse page_use() const;

  std::int64_t nodes() const { return live_nodes_; }            // kRoot excluded
  std::int64_t cached_tokens() const { return cached_tokens_; }  // sum over live nodes
  const PagePool& pool() const { return pool_; }

 private:
  struct Slot {
    RadixNode node;
    std::unordered_map<std::int32_t, NodeId> children;  // by first token
    bool live = false;
  };
  // The walk shared by insert and match: the path of nodes the tokens enter, how many tokens
  // matched in all, and how many of them fall in path.back() (< its length: a partial match).
  struct Walk {
    std::vector<NodeId> path;
    std::int64_t matched = 0;
    std::int64_t matched_in_last = 0;
  };
  Walk walk(std::span<const std::int32_t> tokens, bool filled_only) const;
  NodeId split(NodeId id, std::int64_t k);  // returns the new upper node
  NodeId new_slot();
  void evict(NodeId leaf);
  bool evictable(NodeId id) const;
  template <class Goal>
  bool evict_lru_until(Goal goal);
  void check_live(NodeId id, const char* what) const;
  void check_path(std::span<const NodeId> path, const char* what) const;

  PagePool& pool_;
  std::vector<Slot> slots_;        // by NodeId; slots_[kRoot] is the root
  std::vector<NodeId> free_ids_;   // evicted ids, reused LIFO
  std::int64_t live_nodes_ = 0;
  std::int64_t cached_tokens_ = 0;
  std::uint64_t clock_ = 0;
};

}  // namespace hydragen::kv
