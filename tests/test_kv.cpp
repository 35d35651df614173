// The KV-cache bookkeeping (host only): PagePool refcounts and all-or-nothing allocation,
// RadixTree insert / match / split page sharing / locks / LRU eviction, and a randomized
// property test whose invariants tie every node's pages to the pool's refcounts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>

#include "engine/model_runner.h"
#include "hydragen/error.h"
#include "kv/page_pool.h"
#include "kv/radix_tree.h"

namespace hydragen::kv {
namespace {

using Tokens = std::vector<std::int32_t>;

Tokens concat_tokens(const RadixTree& tree, const std::vector<NodeId>& path) {
  Tokens out;
  for (const NodeId id : path) {
    const auto& t = tree.node(id).tokens;
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

Tokens iota_tokens(int n, int start = 100) {
  Tokens t(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<std::size_t>(i)] = start + i;
  return t;
}

std::vector<NodeId> insert_ok(RadixTree& tree, const Tokens& tokens) {
  auto path = tree.insert(tokens);
  EXPECT_TRUE(path.has_value());
  return path.value_or(std::vector<NodeId>{});
}

void fill(RadixTree& tree, const std::vector<NodeId>& path) {
  for (const NodeId id : path) tree.set_filled(id);
}

// f must throw hydragen::Error whose message contains `fragment`.
template <class F>
void expect_error(F f, const char* fragment) {
  try {
    f();
    ADD_FAILURE() << "no hydragen::Error; expected one saying: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// ---- The K/V pool's size ----------------------------------------------------

// Issue 5: the pool takes the device's free memory after the weights (less a reserve) unless
// --kv-memory or a page count says otherwise; too little memory, or an asked size past what is
// free, is an error that names the sizes.
TEST(KvPoolSize, TakesTheFreeMemoryLessTheReserveUnlessAsked) {
  engine::RunnerOptions o;
  o.page_size = 64;
  const std::int64_t per_token = 1000, gb = 1000000000;
  EXPECT_EQ(engine::kv_pool_pages(o, per_token, 10 * gb, gb), 9 * gb / (64 * per_token));
  EXPECT_EQ(engine::kv_pool_pages(o, per_token, 10 * gb + 64 * per_token - 1, gb), 9 * gb / (64 * per_token));
  EXPECT_EQ(engine::kv_pool_pages(o, per_token, -1, 0), engine::kCpuKvBytes / (64 * per_token));  // the CPU
  o.kv_memory_bytes = 2 * gb;
  EXPECT_EQ(engine::kv_pool_pages(o, per_token, 10 * gb, gb), 2 * gb / (64 * per_token));
  EXPECT_EQ(engine::kv_pool_pages(o, per_token, -1, 0), 2 * gb / (64 * per_token));
  o.kv_memory_bytes = 100;  // less than a page: still one
  EXPECT_EQ(engine::kv_pool_pages(o, per_token, 10 * gb, gb), 1);
  o.kv_pages = 7;  // a page count wins over everything
  EXPECT_EQ(engine::kv_pool_pages(o, per_token, 10 * gb, gb), 7);
  o.page_size = 16, o.kv_pages = 0, o.kv_memory_bytes = 0;
  EXPECT_EQ(engine::kv_pool_pages(o, per_token, 10 * gb, gb), 9 * gb / (16 * per_token));
}

TEST(KvPoolSize, RefusesWhatTheDeviceCannotHoldAndCapsAtInt32Slots) {
  engine::RunnerOptions o;
  const std::int64_t gb = 1000000000;
  expect_error([&] { engine::kv_pool_pages(o, 1000, gb + 1000, gb); }, "no room for a K/V pool");
  expect_error([&] { engine::kv_pool_pages(o, 1000, gb / 2, gb); }, "476 MiB free after the weights");
  o.kv_memory_bytes = 20 * gb;
  expect_error([&] { engine::kv_pool_pages(o, 1000, 10 * gb, gb); }, "--kv-memory: 19073 MiB asked");
  expect_error([&] { engine::kv_pool_pages(o, 1000, 10 * gb, gb); }, "at most 8583 MiB");
  EXPECT_EQ(engine::kv_pool_pages(o, 1000, -1, 0), 20 * gb / (64 * 1000));  // the CPU: no device to check
  o.kv_memory_bytes = 0;
  // A tiny model on a big device: every slot and the sink page within int32.
  const std::int64_t pages = engine::kv_pool_pages(o, 2, 1000 * gb, gb);
  EXPECT_EQ(pages, std::numeric_limits<std::int32_t>::max() / 64 - 1);
  EXPECT_LE((pages + 1) * 64, std::int64_t{std::numeric_limits<std::int32_t>::max()});
}

// ---- PagePool ---------------------------------------------------------------

TEST(PagePool, FreshPoolHandsOutLowestIdsThenReusesLastFreed) {
  PagePool pool(8, 16);
  EXPECT_EQ(pool.page_size(), 16);
  EXPECT_EQ(pool.num_pages(), 8);
  EXPECT_EQ(*pool.allocate(3), (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.free_pages(), 5);
  EXPECT_EQ(pool.used_pages(), 3);
  pool.release(1);
  EXPECT_EQ(*pool.allocate(2), (std::vector<std::int32_t>{1, 3}));  // LIFO: the freed page first
  EXPECT_TRUE(pool.allocate(0)->empty());
}

TEST(PagePool, AllocationIsAllOrNothing) {
  PagePool pool(4, 4);
  ASSERT_TRUE(pool.allocate(3).has_value());
  EXPECT_FALSE(pool.allocate(2).has_value());
  EXPECT_EQ(pool.free_pages(), 1);
  EXPECT_EQ(pool.refcount(3), 0);
  EXPECT_EQ(*pool.allocate(1), (std::vector<std::int32_t>{3}));
  EXPECT_FALSE(pool.allocate(1).has_value());
  PagePool empty(0, 4);
  EXPECT_FALSE(empty.allocate(1).has_value());
  EXPECT_TRUE(empty.allocate(0)->empty());
}

TEST(PagePool, RefcountsFreeAPageOnlyAtZero) {
  PagePool pool(2, 4);
  const auto pages = *pool.allocate(2);
  EXPECT_EQ(pool.refcount(0), 1);
  pool.retain(0);
  pool.retain(0);
  EXPECT_EQ(pool.refcount(0), 3);
  pool.release(0);
  pool.release(pages);  // 0 -> 1, 1 -> 0
  EXPECT_EQ(pool.refcount(0), 1);
  EXPECT_EQ(pool.refcount(1), 0);
  EXPECT_EQ(pool.free_pages(), 1);
}

TEST(PagePool, RejectsBadIdsAndDoubleRelease) {
  PagePool pool(3, 4);
  const auto pages = *pool.allocate(2);
  EXPECT_THROW(pool.release(5), Error);
  EXPECT_THROW(pool.release(-1), Error);
  EXPECT_THROW(pool.retain(3), Error);
  EXPECT_THROW(pool.refcount(-2), Error);
  EXPECT_THROW(pool.retain(2), Error);   // free
  EXPECT_THROW(pool.release(2), Error);  // free
  pool.release(pages[0]);
  EXPECT_THROW(pool.release(pages[0]), Error);  // double release
  // A list that releases page 1 more often than it is held changes nothing.
  const std::int32_t too_many[] = {1, 1};
  expect_error([&] { pool.release(too_many); }, "more often than it is referenced");
  EXPECT_EQ(pool.refcount(1), 1);
  EXPECT_EQ(pool.free_pages(), 2);
  expect_error([&] { pool.release(0); }, "already free");
  EXPECT_THROW(pool.allocate(-1), Error);
  EXPECT_THROW(PagePool(-1, 4), Error);
  EXPECT_THROW(PagePool(4, 0), Error);
}

TEST(PagePool, TracksPeakUse) {
  PagePool pool(10, 4);
  pool.release(*pool.allocate(6));
  ASSERT_TRUE(pool.allocate(2).has_value());
  EXPECT_EQ(pool.used_pages(), 2);
  EXPECT_EQ(pool.peak_used_pages(), 6);
  ASSERT_TRUE(pool.allocate(7).has_value());
  EXPECT_EQ(pool.peak_used_pages(), 9);
  EXPECT_FALSE(pool.allocate(5).has_value());
  EXPECT_EQ(pool.peak_used_pages(), 9);
}

// ---- RadixTree: insert, match, split ----------------------------------------

TEST(RadixTree, InsertTakesFreshPagesAndIdenticalPromptsShareOnePath) {
  PagePool pool(16, 4);
  RadixTree tree(pool);
  const Tokens prompt = iota_tokens(10);
  const auto path = insert_ok(tree, prompt);
  ASSERT_EQ(path.size(), 1u);
  const RadixNode& n = tree.node(path[0]);
  EXPECT_EQ(n.parent, kRoot);
  EXPECT_EQ(n.tokens, prompt);
  EXPECT_EQ(n.pages, (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(n.first_slot, 0);
  EXPECT_EQ(n.depth_tokens, 0);
  EXPECT_FALSE(n.filled);
  EXPECT_EQ(insert_ok(tree, prompt), path);
  EXPECT_EQ(tree.nodes(), 1);
  EXPECT_EQ(tree.cached_tokens(), 10);
  EXPECT_EQ(pool.used_pages(), 3);
  EXPECT_EQ(tree.node(kRoot).parent, -1);
}

// Splits a cached prompt of `len` tokens by a second prompt diverging after `k` tokens and
// checks the page sharing rule for both parts.
void check_split(int page_size, int len, int k) {
  SCOPED_TRACE(testing::Message() << "page_size " << page_size << " len " << len << " k " << k);
  PagePool pool(64, page_size);
  RadixTree tree(pool);
  const Tokens first = iota_tokens(len);
  const NodeId cached = insert_ok(tree, first).back();
  const std::vector<std::int32_t> old_pages = tree.node(cached).pages;
  Tokens second(first.begin(), first.begin() + k);
  second.push_back(7);
  second.push_back(8);
  const auto path = insert_ok(tree, second);
  ASSERT_EQ(path.size(), 2u);
  EXPECT_EQ(concat_tokens(tree, path), second);
  const RadixNode& upper = tree.node(path[0]);
  const RadixNode& lower = tree.node(cached);  // the lower part keeps the id
  EXPECT_EQ(lower.parent, path[0]);
  EXPECT_EQ(concat_tokens(tree, tree.path_to(cached)), first);
  EXPECT_EQ(upper.depth_tokens, 0);
  EXPECT_EQ(lower.depth_tokens, k);
  EXPECT_EQ(lower.first_slot, k % page_size);
  const auto upper_pages = static_cast<std::size_t>((k + page_size - 1) / page_size);
  EXPECT_EQ(upper.pages, std::vector<std::int32_t>(old_pages.begin(), old_pages.begin() + upper_pages));
  EXPECT_EQ(lower.pages, std::vector<std::int32_t>(old_pages.begin() + k / page_size, old_pages.end()));
  const bool inside_page = k % page_size != 0;
  if (inside_page) {
    EXPECT_EQ(upper.pages.back(), lower.pages.front());
  }
  EXPECT_EQ(pool.refcount(old_pages[static_cast<std::size_t>(k / page_size)]), inside_page ? 2 : 1);
  // The new node starts fresh; only the original pages plus one are in use.
  EXPECT_EQ(tree.node(path[1]).first_slot, 0);
  EXPECT_EQ(tree.node(path[1]).depth_tokens, k);
  EXPECT_EQ(pool.used_pages(), static_cast<std::int64_t>(old_pages.size()) + 1);
  EXPECT_EQ(tree.nodes(), 3);
  EXPECT_EQ(tree.cached_tokens(), len + 2);
}

TEST(RadixTree, DivergenceInsideAPageSharesTheBoundaryPage) {
  check_split(4, 10, 6);
  check_split(4, 10, 1);
  check_split(16, 40, 21);
  check_split(16, 40, 3);
}

TEST(RadixTree, DivergenceOnAPageBoundarySharesNoPage) {
  check_split(4, 10, 4);
  check_split(4, 10, 8);
  check_split(16, 40, 16);
  check_split(16, 40, 32);
}

TEST(RadixTree, PromptThatIsAPrefixOfACachedOneSplitsWithoutNewPages) {
  PagePool pool(8, 4);
  RadixTree tree(pool);
  const Tokens prompt = iota_tokens(9);
  const NodeId leaf = insert_ok(tree, prompt).back();
  const Tokens prefix(prompt.begin(), prompt.begin() + 5);
  const auto path = insert_ok(tree, prefix);
  ASSERT_EQ(path.size(), 1u);
  EXPECT_EQ(tree.node(path[0]).tokens, prefix);
  EXPECT_EQ(tree.path_to(leaf), (std::vector<NodeId>{path[0], leaf}));
  EXPECT_EQ(pool.used_pages(), 3);
  EXPECT_EQ(pool.refcount(1), 2);  // slot 5 of 9 lies inside page 1
  EXPECT_EQ(tree.nodes(), 2);
}

TEST(RadixTree, MatchCountsOnlyFilledNodesAndNeverSplits) {
  PagePool pool(16, 4);
  RadixTree tree(pool);
  Tokens a = iota_tokens(8);
  Tokens b = a;
  b.resize(4);
  b.insert(b.end(), {1, 2, 3});
  const auto path_a = insert_ok(tree, a);
  EXPECT_EQ(tree.match(a).tokens, 0);  // nothing filled yet
  const auto path_b = insert_ok(tree, b);  // splits a at 4: [shared][a rest], [b rest]
  ASSERT_EQ(path_b.size(), 2u);
  tree.set_filled(path_b[0]);
  Tokens query = a;
  query.push_back(99);
  auto m = tree.match(query);
  EXPECT_EQ(m.tokens, 4);  // a's tail is not filled
  EXPECT_EQ(m.path, (std::vector<NodeId>{path_b[0]}));
  fill(tree, tree.path_to(path_a.back()));
  m = tree.match(query);
  EXPECT_EQ(m.tokens, 8);
  EXPECT_EQ(m.path, tree.path_to(path_a.back()));
  // Ending inside a node: counts up to there and leaves the node whole.
  const Tokens partial = {100, 101, 102, 103, 104, 105, 55};
  m = tree.match(partial);
  EXPECT_EQ(m.tokens, 6);
  EXPECT_EQ(m.path.back(), path_a.back());
  EXPECT_EQ(tree.nodes(), 3);
  EXPECT_EQ(tree.match(Tokens{5, 6}).tokens, 0);
  EXPECT_TRUE(tree.match(Tokens{}).path.empty());
}

TEST(RadixTree, SplitKeepsTheLeafIdAndPathToRefreshesAHeldPath) {
  PagePool pool(16, 4);
  RadixTree tree(pool);
  const Tokens a = iota_tokens(10);
  const auto held = insert_ok(tree, a);
  tree.lock(held);
  Tokens b(a.begin(), a.begin() + 3);
  b.push_back(1);
  insert_ok(tree, b);  // splits the held node
  expect_error([&] { tree.unlock(held); }, "re-read a held path with path_to");  // stale
  const auto fresh = tree.path_to(held.back());
  ASSERT_EQ(fresh.size(), 2u);
  EXPECT_EQ(concat_tokens(tree, fresh), a);
  EXPECT_EQ(tree.node(fresh[0]).locks, 1);  // both parts keep the lock
  EXPECT_EQ(tree.node(fresh[1]).locks, 1);
  tree.unlock(fresh);
  EXPECT_EQ(tree.node(fresh[0]).locks, 0);
  EXPECT_EQ(tree.node(fresh[1]).locks, 0);
}

// A node prefilled in chunks: its filled tokens only grow; a split divides them between the
// parts (the upper part filled up to the split, the lower the rest), so a prompt that diverges
// inside a node being prefilled shares what is done and match() sees only whole filled nodes.
TEST(RadixTree, PrefillProgressSplitsWithTheNode) {
  PagePool pool(16, 4);
  RadixTree tree(pool);
  const Tokens a = iota_tokens(10);
  const auto path = insert_ok(tree, a);
  tree.set_filled_tokens(path[0], 6);
  EXPECT_FALSE(tree.node(path[0]).filled);
  EXPECT_EQ(tree.match(a).tokens, 0);
  expect_error([&] { tree.set_filled_tokens(path[0], 5); }, "must be in [6, 10]");
  expect_error([&] { tree.set_filled_tokens(path[0], 11); }, "must be in [6, 10]");
  Tokens b(a.begin(), a.begin() + 4);
  b.push_back(1);
  const auto split = tree.path_to(insert_ok(tree, a).back());  // (the same prompt: no split)
  EXPECT_EQ(split, path);
  insert_ok(tree, b);  // splits at 4: upper [0, 4) filled, lower [4, 10) 2 of 6
  const auto fresh = tree.path_to(path[0]);
  ASSERT_EQ(fresh.size(), 2u);
  EXPECT_TRUE(tree.node(fresh[0]).filled);
  EXPECT_EQ(tree.node(fresh[0]).filled_tokens, 4);
  EXPECT_EQ(tree.node(fresh[1]).filled_tokens, 2);
  EXPECT_FALSE(tree.node(fresh[1]).filled);
  EXPECT_EQ(tree.match(a).tokens, 4);
  Tokens c(a.begin(), a.begin() + 8);
  c.push_back(1);
  insert_ok(tree, c);  // splits the lower part at 4 of its 6, past its 2 filled: 2 and 0
  const auto again = tree.path_to(path[0]);
  ASSERT_EQ(again.size(), 3u);
  EXPECT_EQ(tree.node(again[1]).filled_tokens, 2);
  EXPECT_EQ(tree.node(again[2]).filled_tokens, 0);
  tree.set_filled(again[1]);
  tree.set_filled(again[2]);
  EXPECT_EQ(tree.match(a).tokens, 10);
}

// Pages by who holds them: locked (shared when a node is held twice) and cached (unlocked
// nodes only); a boundary page of a split counts once, as locked if either part is.
TEST(RadixTree, PageUseTellsLockedSharedAndCachedPages) {
  PagePool pool(16, 4);
  RadixTree tree(pool);
  const auto a = insert_ok(tree, iota_tokens(10));  // 3 pages
  tree.lock(a);
  tree.lock(a);
  auto use = tree.page_use();
  EXPECT_EQ(use.locked, 3);
  EXPECT_EQ(use.shared, 3);
  EXPECT_EQ(use.cached, 0);
  Tokens b = iota_tokens(6);
  b.push_back(1);
  const auto pb = insert_ok(tree, b);  // splits at 6, inside page 1: a fresh page for [1]
  tree.unlock(tree.path_to(a.back()));
  tree.unlock(tree.path_to(a.back()));
  tree.lock(pb);
  use = tree.page_use();
  EXPECT_EQ(use.locked, 3);  // [0, 6): pages 0-1, [1]: its page
  EXPECT_EQ(use.shared, 0);
  EXPECT_EQ(use.cached, 1);  // [6, 10)'s last page (its first is the boundary page, locked above)
  tree.unlock(pb);
  use = tree.page_use();
  EXPECT_EQ(use.locked, 0);
  EXPECT_EQ(use.cached, pool.used_pages());
}

// ---- RadixTree: locks and eviction ------------------------------------------

TEST(RadixTree, LockAndUnlockCountAndRejectBadPaths) {
  PagePool pool(8, 4);
  RadixTree tree(pool);
  const auto path = insert_ok(tree, iota_tokens(5));
  tree.lock(path);
  tree.lock(path);
  EXPECT_EQ(tree.node(path[0]).locks, 2);
  tree.unlock(path);
  tree.unlock(path);
  EXPECT_THROW(tree.unlock(path), Error);
  EXPECT_EQ(tree.node(path[0]).locks, 0);
  const NodeId with_root[] = {kRoot, path[0]}, unknown[] = {42};
  expect_error([&] { tree.lock(with_root); }, "path must exclude kRoot");
  expect_error([&] { tree.lock(unknown); }, "must name a live node, got 42");
  expect_error([&] { tree.node(42); }, "must name a live node");
  expect_error([&] { tree.set_filled(kRoot); }, "must not be kRoot");
  expect_error([&] { tree.insert(Tokens{}); }, "tokens must hold >= 1 token");
  expect_error([&] { tree.make_room(-1); }, "pages must be >= 0");
  tree.lock({});  // an empty path is a no-op
}

TEST(RadixTree, EvictsLeastRecentlyUsedLeafFirst) {
  PagePool pool(3, 4);
  RadixTree tree(pool);
  const Tokens a = {1, 1, 1, 1}, b = {2, 2, 2, 2}, c = {3, 3, 3, 3}, d = {4, 4, 4, 4};
  const auto pa = insert_ok(tree, a), pb = insert_ok(tree, b), pc = insert_ok(tree, c);
  fill(tree, pa), fill(tree, pb), fill(tree, pc);
  tree.lock(pa);  // touches a: b is now the oldest
  tree.unlock(pa);
  fill(tree, insert_ok(tree, d));  // evicts b
  EXPECT_EQ(tree.match(b).tokens, 0);
  EXPECT_EQ(tree.match(a).tokens, 4);
  EXPECT_EQ(tree.match(c).tokens, 4);
  insert_ok(tree, b);  // evicts c
  EXPECT_EQ(tree.match(c).tokens, 0);
  EXPECT_EQ(tree.match(a).tokens, 4);
  EXPECT_EQ(tree.nodes(), 3);
}

TEST(RadixTree, ParentThatBecomesALeafIsEvictedInTurn) {
  PagePool pool(4, 4);
  RadixTree tree(pool);
  insert_ok(tree, {5, 5, 5, 5, 6, 6, 6, 6});
  insert_ok(tree, {5, 5, 5, 5, 7, 7, 7, 7});  // [5555] -> {[6666], [7777]}, 3 pages
  EXPECT_EQ(tree.nodes(), 3);
  EXPECT_TRUE(tree.make_room(2));  // one leaf suffices
  EXPECT_EQ(tree.nodes(), 2);
  EXPECT_EQ(tree.node(insert_ok(tree, {5, 5, 5, 5, 7, 7, 7, 7}).back()).tokens.size(), 4u);
  EXPECT_TRUE(tree.make_room(4));  // both leaves, then their parent
  EXPECT_EQ(tree.nodes(), 0);
  EXPECT_EQ(pool.free_pages(), 4);
  EXPECT_FALSE(tree.make_room(5));  // more than the pool holds
}

TEST(RadixTree, LockedNodesAreNeverEvicted) {
  PagePool pool(4, 4);
  RadixTree tree(pool);
  const auto locked = insert_ok(tree, {1, 2, 3, 4, 5});
  insert_ok(tree, {9, 9});
  tree.lock(locked);
  EXPECT_FALSE(tree.make_room(4));
  EXPECT_EQ(tree.nodes(), 1);
  EXPECT_EQ(tree.path_to(locked.back()), locked);
  tree.evict_all_unlocked();
  EXPECT_EQ(tree.nodes(), 1);
  EXPECT_EQ(pool.used_pages(), 2);
}

TEST(RadixTree, InsertFailsWhenThePoolIsFullOfLockedNodes) {
  PagePool pool(2, 4);
  RadixTree tree(pool);
  const auto held = insert_ok(tree, iota_tokens(8));
  tree.lock(held);
  EXPECT_FALSE(tree.insert(Tokens{9}).has_value());
  EXPECT_EQ(tree.nodes(), 1);
  EXPECT_EQ(pool.free_pages(), 0);
  // Diverging inside the locked node: the split may remain, nothing else changes.
  EXPECT_FALSE(tree.insert(Tokens{100, 101, 9}).has_value());
  const auto fresh = tree.path_to(held.back());
  EXPECT_EQ(concat_tokens(tree, fresh), iota_tokens(8));
  EXPECT_EQ(tree.cached_tokens(), 8);
  EXPECT_EQ(pool.used_pages(), 2);
  tree.unlock(fresh);
  EXPECT_TRUE(tree.insert(Tokens{100, 101, 9}).has_value());  // evicts the old tail
  // More pages than the pool holds: fails at once, without evicting the cache for nothing.
  EXPECT_FALSE(tree.insert(iota_tokens(20, 500)).has_value());
  EXPECT_FALSE(tree.make_room(3));
  EXPECT_EQ(tree.nodes(), 2);
}

TEST(RadixTree, DestructionReleasesEveryPage) {
  PagePool pool(32, 4);
  {
    RadixTree tree(pool);
    insert_ok(tree, iota_tokens(10));
    insert_ok(tree, {100, 101, 102, 103, 104, 1, 2});
    tree.lock(insert_ok(tree, {100, 101, 7}));
    EXPECT_GT(pool.used_pages(), 0);
  }
  EXPECT_EQ(pool.free_pages(), 32);
}

// ---- RadixTree: randomized property test -----------------------------------

struct Held {  // a sequence: its deepest node and its prompt
  NodeId leaf;
  Tokens prompt;
};

void check_invariants(const RadixTree& tree, const PagePool& pool, const std::vector<Held>& held) {
  const int ps = pool.page_size();
  const auto ids = tree.node_ids();
  ASSERT_EQ(tree.nodes(), static_cast<std::int64_t>(ids.size()));
  std::map<std::int32_t, int> listed;  // page -> nodes listing it
  std::set<std::pair<NodeId, std::int32_t>> first_tokens;
  std::int64_t tokens = 0;
  for (const NodeId id : ids) {
    const RadixNode& n = tree.node(id);
    const RadixNode& parent = tree.node(n.parent);
    const auto len = static_cast<std::int64_t>(n.tokens.size());
    ASSERT_GE(len, 1);
    ASSERT_TRUE(n.first_slot >= 0 && n.first_slot < ps);
    ASSERT_EQ(static_cast<std::int64_t>(n.pages.size()), (n.first_slot + len + ps - 1) / ps) << "node " << id;
    ASSERT_EQ(n.depth_tokens, parent.depth_tokens + static_cast<std::int64_t>(parent.tokens.size()));
    ASSERT_TRUE(first_tokens.emplace(n.parent, n.tokens[0]).second) << "siblings share a first token";
    if (n.first_slot != 0) {  // split inside a page: the boundary page is the parent's last
      ASSERT_NE(n.parent, kRoot);
      ASSERT_EQ((parent.first_slot + static_cast<std::int64_t>(parent.tokens.size())) % ps, n.first_slot);
      ASSERT_EQ(parent.pages.back(), n.pages.front()) << "node " << id;
    }
    for (const std::int32_t page : n.pages) ++listed[page];
    tokens += len;
  }
  ASSERT_EQ(tree.cached_tokens(), tokens);
  for (const auto& [page, count] : listed) ASSERT_EQ(pool.refcount(page), count) << "page " << page;
  ASSERT_EQ(static_cast<std::int64_t>(listed.size()), pool.used_pages());
  std::map<NodeId, int> locks;
  for (const Held& h : held) {
    const auto path = tree.path_to(h.leaf);
    ASSERT_EQ(concat_tokens(tree, path), h.prompt);
    for (const NodeId id : path) ++locks[id];
  }
  for (const NodeId id : ids) ASSERT_EQ(tree.node(id).locks, locks[id]) << "node " << id;
}

// The longest common prefix of `prompt` with any fully filled root path: match's oracle.
std::int64_t brute_force_match(const RadixTree& tree, const Tokens& prompt) {
  std::int64_t best = 0;
  for (const NodeId id : tree.node_ids()) {
    const auto path = tree.path_to(id);
    if (!std::all_of(path.begin(), path.end(), [&](NodeId p) { return tree.node(p).filled; })) continue;
    const Tokens stored = concat_tokens(tree, path);
    const auto n = std::min(stored.size(), prompt.size());
    const auto lcp = std::mismatch(stored.begin(), stored.begin() + static_cast<std::ptrdiff_t>(n), prompt.begin()).first - stored.begin();
    best = std::max<std::int64_t>(best, lcp);
  }
  return best;
}

// What a run went through, so the test cannot pass by never reaching the hard cases.
struct Coverage {
  int failed_inserts = 0, evictions = 0, shared_boundary_pages = 0, partial_matches = 0;
};

void run_random_ops(int page_size, std::uint32_t seed, Coverage& seen) {
  SCOPED_TRACE(testing::Message() << "page_size " << page_size << " seed " << seed);
  constexpr int kMaxLen = 40;
  PagePool pool(kMaxLen, page_size);  // >= kMaxLen pages: an insert with no locks always fits
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto pick = [&](const auto& v) { return static_cast<std::size_t>(uniform(0, static_cast<int>(v.size()) - 1)); };
  std::vector<Tokens> prompts;
  auto random_prompt = [&] {
    Tokens t;
    if (!prompts.empty() && uniform(0, 1)) {  // extend a prefix of an earlier prompt
      const Tokens& base = prompts[pick(prompts)];
      t.assign(base.begin(), base.begin() + uniform(0, static_cast<int>(base.size())));
    }
    const int len = uniform(std::max<int>(1, static_cast<int>(t.size())), kMaxLen);
    while (static_cast<int>(t.size()) < len) t.push_back(uniform(0, 2));
    prompts.push_back(t);
    return t;
  };
  {
    RadixTree tree(pool);
    std::vector<Held> held;
    for (int op = 0; op < 1500; ++op) {
      const int kind = uniform(0, 99);
      if (kind < 45) {
        const Tokens prompt = random_prompt();
        const auto nodes_before = tree.nodes();
        const auto path = tree.insert(prompt);
        if (tree.nodes() < nodes_before) ++seen.evictions;
        if (!path) {
          ++seen.failed_inserts;
          ASSERT_FALSE(held.empty()) << "insert failed with nothing locked";
        } else {
          ASSERT_EQ(concat_tokens(tree, *path), prompt);
          ASSERT_EQ(tree.path_to(path->back()), *path);
          if (uniform(0, 1)) fill(tree, *path);
          if (uniform(0, 2) == 0) {
            tree.lock(*path);
            held.push_back({path->back(), prompt});
          }
        }
      } else if (kind < 60 && !held.empty()) {
        const auto i = pick(held);
        tree.unlock(tree.path_to(held[i].leaf));
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (kind < 65 && !held.empty()) {  // a second sequence on a held prompt
        const Held h = held[pick(held)];
        tree.lock(tree.path_to(h.leaf));
        held.push_back(h);
      } else if (kind < 75) {
        const int goal = uniform(0, kMaxLen + 2);
        const auto nodes_before = tree.nodes();
        const bool met = tree.make_room(goal);
        if (tree.nodes() < nodes_before) ++seen.evictions;
        ASSERT_EQ(met, pool.free_pages() >= goal);
        if (!met && goal <= kMaxLen) {  // nothing evictable is left: every leaf is locked
          std::set<NodeId> parents;
          for (const NodeId id : tree.node_ids()) parents.insert(tree.node(id).parent);
          for (const NodeId id : tree.node_ids())
            ASSERT_TRUE(parents.count(id) || tree.node(id).locks > 0) << "evictable leaf " << id;
        }
      } else {
        const Tokens query = uniform(0, 1) || prompts.empty() ? random_prompt() : prompts[pick(prompts)];
        const auto m = tree.match(query);
        ASSERT_EQ(m.tokens, brute_force_match(tree, query));
        if (!m.path.empty()) {
          ASSERT_EQ(tree.path_to(m.path.back()), m.path);
          const Tokens stored = concat_tokens(tree, m.path);
          ASSERT_GT(m.tokens, tree.node(m.path.back()).depth_tokens);
          if (m.tokens < static_cast<std::int64_t>(stored.size())) ++seen.partial_matches;
          ASSERT_LE(m.tokens, static_cast<std::int64_t>(stored.size()));
          ASSERT_TRUE(std::equal(query.begin(), query.begin() + m.tokens, stored.begin()));
        }
      }
      ASSERT_NO_FATAL_FAILURE(check_invariants(tree, pool, held)) << "after op " << op;
      for (const NodeId id : tree.node_ids()) seen.shared_boundary_pages += tree.node(id).first_slot != 0;
    }
    for (const Held& h : held) tree.unlock(tree.path_to(h.leaf));
    held.clear();
    tree.evict_all_unlocked();
    EXPECT_EQ(tree.nodes(), 0);
    EXPECT_EQ(tree.cached_tokens(), 0);
    EXPECT_EQ(pool.used_pages(), 0);
    insert_ok(tree, random_prompt());  // reused ids and pages still work
    ASSERT_NO_FATAL_FAILURE(check_invariants(tree, pool, held));
  }
  EXPECT_EQ(pool.free_pages(), pool.num_pages());
}

TEST(RadixTreeProperty, RandomInsertLockUnlockEvictKeepsInvariants) {
  for (const int page_size : {4, 16}) {
    Coverage seen;
    for (const std::uint32_t seed : {1u, 2u, 3u}) ASSERT_NO_FATAL_FAILURE(run_random_ops(page_size, seed, seen));
    EXPECT_GT(seen.failed_inserts, 0) << "page_size " << page_size;
    EXPECT_GT(seen.evictions, 0) << "page_size " << page_size;
    EXPECT_GT(seen.shared_boundary_pages, 0) << "page_size " << page_size;
    EXPECT_GT(seen.partial_matches, 0) << "page_size " << page_size;
    std::printf("page_size %d: %d failed inserts, %d evicting ops, %d node-steps on a shared page, %d partial matches\n",
                page_size, seen.failed_inserts, seen.evictions, seen.shared_boundary_pages, seen.partial_matches);
  }
}

}  // namespace
}  // namespace hydragen::kv
