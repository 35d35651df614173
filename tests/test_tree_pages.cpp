// plan::page_tree: the pool layout public tree attention runs its plan over, as the engine
// lays K/V out: segments back to back (starting inside pages), each sequence on fresh pages,
// the dense layout one copy of each context per sequence; every token written exactly once.
#include <gtest/gtest.h>

#include <set>

#include "hydragen/attention.h"
#include "hydragen/error.h"
#include "plan/paged_plan.h"
#include "plan/tree_pages.h"

namespace hydragen {
namespace {

Tensor kv(std::int64_t len) { return Tensor::zeros({len, 2, 8}, DType::f32); }

// Root 20, child 30, empty root, a second child 5; sequences under the child, the empty root,
// none; suffixes 3, 0, 17 tokens.
SharingTree forest() {
  SharingTree tree;
  tree.segments = {{kNoParent, kv(20), kv(20)}, {0, kv(30), kv(30)}, {kNoParent, kv(0), kv(0)}, {0, kv(5), kv(5)}};
  tree.sequences = {{1, kv(3), kv(3), 2}, {2, kv(0), kv(0), 1}, {kNoParent, kv(17), kv(17), 4}};
  return tree;
}

// Every slot written at most once, and the layout one build_attention_plan accepts.
void expect_disjoint_and_plannable(const plan::TreePages& paged) {
  std::set<std::int64_t> slots;
  for (const auto& copy : paged.copies)
    for (std::int64_t t = 0; t < copy.k->size(0); ++t) {
      EXPECT_TRUE(slots.insert(copy.slot + t).second) << "slot " << copy.slot + t << " written twice";
      EXPECT_LT(copy.slot + t, paged.pages * paged.layout.page_size);
    }
  EXPECT_NO_THROW(plan::build_attention_plan(paged.layout));
}

TEST(TreePages, SegmentsBackToBackSequencesOnFreshPages) {
  const SharingTree tree = forest();
  const plan::TreePages paged = plan::page_tree(tree, 4, 16, false);
  const plan::PagedLayout& l = paged.layout;
  ASSERT_EQ(l.segments.size(), 4u);
  EXPECT_EQ(l.segments[0].pages, (std::vector<std::int32_t>{0, 1}));  // slots 0-19
  EXPECT_EQ(l.segments[1].first_slot, 4);                             // slots 20-49, inside page 1
  EXPECT_EQ(l.segments[1].pages, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(l.segments[2].first_slot, 2);  // empty, at slot 50
  EXPECT_EQ(l.segments[2].pages, (std::vector<std::int32_t>{3}));
  EXPECT_EQ(l.segments[3].first_slot, 2);  // slots 50-54
  EXPECT_EQ(l.segments[3].parent, 0);
  ASSERT_EQ(l.sequences.size(), 3u);
  EXPECT_EQ(l.sequences[0].pages, (std::vector<std::int32_t>{4}));  // a fresh page after slot 54
  EXPECT_EQ(l.sequences[0].parent, 1);
  EXPECT_EQ(l.sequences[0].query_tokens, 2);
  EXPECT_TRUE(l.sequences[1].pages.empty());
  EXPECT_EQ(l.sequences[2].pages, (std::vector<std::int32_t>{5, 6}));
  for (const auto& seq : l.sequences) EXPECT_EQ(seq.first_slot, 0);
  EXPECT_EQ(paged.pages, 7);
  EXPECT_EQ(l.q_heads, 4);
  EXPECT_EQ(l.kv_heads, 2);
  EXPECT_EQ(l.head_dim, 8);
  expect_disjoint_and_plannable(paged);
}

TEST(TreePages, DenseGivesEachSequenceItsWholeContext) {
  const SharingTree tree = forest();
  const plan::TreePages paged = plan::page_tree(tree, 2, 16, true);
  EXPECT_TRUE(paged.layout.segments.empty());
  ASSERT_EQ(paged.layout.sequences.size(), 3u);
  EXPECT_EQ(paged.layout.sequences[0].suffix_tokens, 20 + 30 + 3);
  EXPECT_EQ(paged.layout.sequences[1].suffix_tokens, 0);
  EXPECT_EQ(paged.layout.sequences[2].suffix_tokens, 17);
  for (const auto& seq : paged.layout.sequences) EXPECT_EQ(seq.parent, kNoParent);
  // Sequence 0's copies: the root, the child, then its suffix, one after another.
  ASSERT_GE(paged.copies.size(), 3u);
  EXPECT_EQ(paged.copies[0].k, &tree.segments[0].k);
  EXPECT_EQ(paged.copies[1].k, &tree.segments[1].k);
  EXPECT_EQ(paged.copies[1].slot, 20);
  EXPECT_EQ(paged.copies[2].k, &tree.sequences[0].k);
  EXPECT_EQ(paged.copies[2].slot, 50);
  expect_disjoint_and_plannable(paged);
}

TEST(TreePages, RefusesPageSizesThePlanCannotTake) {
  EXPECT_THROW(plan::page_tree(forest(), 4, 24, false), Error);
  EXPECT_THROW(plan::page_tree(forest(), 4, 8, false), Error);
}

}  // namespace
}  // namespace hydragen
