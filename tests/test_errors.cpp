// Bad input throws hydragen::Error whose message names the argument and the expected shape.
#include <functional>

#include "attention_test_util.h"
#include "plan/paged_plan.h"

namespace hydragen::testing {
namespace {

// Runs f; it must throw hydragen::Error whose message contains every fragment.
void expect_error(const std::function<void()>& f, std::initializer_list<const char*> fragments) {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const char* fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos) << "message: " << message << "\nlacks: " << fragment;
    return;
  }
  ADD_FAILURE() << "no hydragen::Error thrown";
}

Tensor kv(std::int64_t len, std::int64_t heads = 4, std::int64_t d = 64, DType dtype = DType::f32) {
  return Tensor::zeros({len, heads, d}, dtype);
}

// Two roots, a child, three sequences: valid until a test breaks it.
SharingTree valid_tree() {
  SharingTree tree;
  tree.segments = {{kNoParent, kv(5), kv(5)}, {0, kv(3), kv(3)}, {kNoParent, kv(2), kv(2)}};
  tree.sequences = {{1, kv(4), kv(4), 1}, {2, kv(6), kv(6), 5}, {kNoParent, kv(1), kv(1), 1}};
  return tree;
}

Tensor query(const SharingTree& tree, std::int64_t heads = 8, std::int64_t d = 64) {
  return Tensor::zeros({tree.query_rows(), heads, d}, DType::f32);
}

TEST(Errors, ValidTreeIsAccepted) {
  const SharingTree tree = valid_tree();
  EXPECT_NO_THROW(tree.validate());
  EXPECT_NO_THROW(tree_attention(tree, query(tree)));
  EXPECT_EQ(tree.path(0), (std::vector<int>{0, 1}));
  EXPECT_EQ(tree.context_tokens(0), 5 + 3 + 4);
  EXPECT_EQ(tree.query_rows(), 7);
}

TEST(Errors, HqNotAMultipleOfHkv) {
  const SharingTree tree = valid_tree();
  expect_error([&] { tree_attention(tree, query(tree, 6)); }, {"tree_attention", "q", "Hq=6", "Hkv=4", "expected"});
  expect_error([&] { attend(Tensor::zeros({1, 6, 64}, DType::f32), kv(3), kv(3)); }, {"attend", "Hq=6", "Hkv=4"});
}

TEST(Errors, MismatchedHeadDims) {
  SharingTree tree = valid_tree();
  tree.segments[1].k = kv(3, 4, 32);
  tree.segments[1].v = kv(3, 4, 32);
  expect_error([&] { tree.validate(); }, {"segment 1 k", "[3, 4, 32]", "expected [len, Hkv=4, d=64]"});
  const SharingTree good = valid_tree();
  expect_error([&] { tree_attention(good, query(good, 8, 128)); }, {"q", "[7, 8, 128]", "d=64"});
  expect_error([&] { attend(Tensor::zeros({1, 4, 32}, DType::f32), kv(3), kv(3)); }, {"attend", "q", "d=64"});
}

TEST(Errors, MismatchedKvHeadsAndDtype) {
  SharingTree tree = valid_tree();
  tree.sequences[2].k = kv(1, 2);
  tree.sequences[2].v = kv(1, 2);
  expect_error([&] { tree.validate(); }, {"sequence 2 suffix k", "expected [len, Hkv=4, d=64]"});
  tree = valid_tree();
  tree.segments[2].k = kv(2, 4, 64, DType::bf16);
  tree.segments[2].v = kv(2, 4, 64, DType::bf16);
  expect_error([&] { tree.validate(); }, {"segment 2 k", "bf16", "expected f32"});
}

TEST(Errors, WrongRank) {
  SharingTree tree = valid_tree();
  tree.segments[0].k = Tensor::zeros({5, 256}, DType::f32);
  expect_error([&] { tree.validate(); }, {"segment 0 k", "rank 2", "expected [len, Hkv, d]"});
  expect_error([&] { attend(Tensor::zeros({8, 64}, DType::f32), kv(3), kv(3)); }, {"attend", "q", "rank 2", "[rows, Hq, d]"});
  expect_error([&] { attend(Tensor::zeros({1, 8, 64}, DType::f32), Tensor::zeros({3, 256}, DType::f32), kv(3)); },
               {"attend", "k", "rank 2", "[S, Hkv, d]"});
}

TEST(Errors, CyclicTree) {
  SharingTree tree = valid_tree();
  tree.segments[0].parent = 1;  // 0 -> 1 -> 0
  expect_error([&] { tree.validate(); }, {"segment 0", "cycle", "0 -> 1 -> 0"});
  tree = valid_tree();
  tree.segments[2].parent = 2;  // its own parent
  expect_error([&] { tree_attention(tree, query(tree)); }, {"segment 2", "cycle"});
}

TEST(Errors, OrphanParent) {
  SharingTree tree = valid_tree();
  tree.segments[1].parent = 7;
  expect_error([&] { tree.validate(); }, {"segment 1", "parent 7", "orphan", "[0, 3)"});
  tree.segments[1].parent = -2;
  expect_error([&] { tree.validate(); }, {"segment 1", "parent -2", "orphan"});
}

TEST(Errors, SequenceOutsideTheTree) {
  SharingTree tree = valid_tree();
  tree.sequences[1].parent = 3;
  expect_error([&] { tree.validate(); }, {"sequence 1", "segment 3", "outside", "[0, 3)"});
}

TEST(Errors, KvShapeMismatch) {
  SharingTree tree = valid_tree();
  tree.sequences[0].v = kv(3);
  expect_error([&] { tree.validate(); }, {"sequence 0 suffix v", "[3, 4, 64]", "expected the shape of its k [4, 4, 64]"});
  expect_error([&] { attend(Tensor::zeros({1, 8, 64}, DType::f32), kv(3), kv(2)); }, {"attend", "v", "[2, 4, 64]", "[3, 4, 64]"});
}

TEST(Errors, CausalSuffixShorterThanQueryTokens) {
  SharingTree tree = valid_tree();
  tree.sequences[1].k = kv(3);
  tree.sequences[1].v = kv(3);
  expect_error([&] { tree_attention(tree, query(tree)); }, {"sequence 1", "query_tokens=5", "[3, 4, 64]", "len >= 5"});
  TreeAttentionOptions non_causal;
  non_causal.causal = false;
  EXPECT_NO_THROW(tree_attention(tree, query(tree), non_causal));
  AttentionOptions causal;
  causal.causal = true;
  expect_error([&] { attend(Tensor::zeros({5, 8, 64}, DType::f32), kv(3), kv(3), causal); }, {"attend", "T=5", "S >= 5"});
}

TEST(Errors, QueryRowsAndTokens) {
  SharingTree tree = valid_tree();
  expect_error([&] { tree_attention(tree, Tensor::zeros({6, 8, 64}, DType::f32)); }, {"q", "[6, 8, 64]", "query_rows=7"});
  tree.sequences[0].query_tokens = 0;
  expect_error([&] { tree.validate(); }, {"sequence 0", "query_tokens=0", ">= 1"});
}

TEST(Errors, HydragenAttentionShapes) {
  const Tensor q = Tensor::zeros({3, 8, 64}, DType::f32);
  const Tensor suffix = Tensor::zeros({3, 10, 4, 64}, DType::f32);
  const std::vector<std::int64_t> lens{1, 2, 3};
  expect_error([&] { hydragen_attention(q, kv(5), kv(5), Tensor::zeros({2, 10, 4, 64}, DType::f32), suffix, lens); },
               {"suffix_k", "[2, 10, 4, 64]", "expected [B=3, S_max, Hkv=4, d=64]"});
  expect_error([&] { hydragen_attention(q, kv(5), kv(5), suffix, suffix, std::vector<std::int64_t>{1, 2}); },
               {"suffix_lens", "2 entries", "B=3"});
  expect_error([&] { hydragen_attention(q, kv(5), kv(5), suffix, suffix, std::vector<std::int64_t>{1, 11, 2}); },
               {"suffix_lens[1] = 11", "0..S_max=10"});
  expect_error([&] { hydragen_attention(q, kv(5), kv(4), suffix, suffix, lens); }, {"prefix_v", "[4, 4, 64]"});
  expect_error([&] { hydragen_attention(Tensor::zeros({3, 6, 64}, DType::f32), kv(5), kv(5), suffix, suffix, lens); },
               {"q", "Hq=6", "Hkv=4"});
}

TEST(Errors, MergeShapesAndModeNames) {
  AttentionState a = AttentionState::empty(2, 4, 8);
  expect_error([&] { merge_states(a, AttentionState::empty(3, 4, 8)); }, {"other.o", "[3, 4, 8]", "[2, 4, 8]"});
  expect_error([&] { merge_states(std::span<const AttentionState>{}); }, {"merge_states", "at least one"});
  expect_error([] { parse_mode("flash"); }, {"flash", "hydragen, paged, dense, none"});
  for (AttentionMode mode : {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense, AttentionMode::none})
    EXPECT_EQ(parse_mode(mode_name(mode)), mode);
}

// `none` skips attention in a model step; an attention call or a plan refuses it by name. A
// page size the plan cannot take and a scale that is not a positive number are refused too.
TEST(Errors, TreeAttentionOptionsAreCheckedByName) {
  const SharingTree tree = valid_tree();
  TreeAttentionOptions options;
  options.mode = AttentionMode::none;
  expect_error([&] { tree_attention(tree, query(tree), options); }, {"tree_attention", "options.mode is none"});
  for (int page_size : {0, 8, 48}) {
    TreeAttentionOptions paged;
    paged.page_size = page_size;
    expect_error([&] { tree_attention(tree, query(tree), paged); },
                 {"tree_attention", "options.page_size is", "power of two >= 16"});
  }
  for (float scale : {0.f, -0.5f, NAN}) {
    TreeAttentionOptions scaled;
    scaled.scale = scale;
    expect_error([&] { tree_attention(tree, query(tree), scaled); }, {"tree_attention", "options.scale", "> 0"});
    AttentionOptions plain;
    plain.scale = scale;
    expect_error([&] { attend(Tensor::zeros({1, 8, 64}, DType::f32), kv(3), kv(3), plain); }, {"attend", "options.scale"});
  }
  plan::PagedLayout layout;
  layout.kv_heads = 1, layout.q_heads = 1, layout.head_dim = 64;
  plan::PlanOptions plan_options;
  plan_options.mode = AttentionMode::none;
  expect_error([&] { plan::build_attention_plan(layout, plan_options); }, {"build_attention_plan", "options.mode is none"});
}

#ifndef HYDRAGEN_WITH_CUDA
TEST(Errors, CudaQueryWithoutCudaBackend) {
  // Views that claim CUDA memory: nothing reads them, the dispatch must refuse first.
  static float fake[64];
  SharingTree tree;
  tree.sequences.push_back({kNoParent, Tensor::wrap(fake, {1, 1, 8}, DType::f32, Device::cuda),
                            Tensor::wrap(fake, {1, 1, 8}, DType::f32, Device::cuda), 1});
  const Tensor q = Tensor::wrap(fake, {1, 2, 8}, DType::f32, Device::cuda);
  expect_error([&] { tree_attention(tree, q); }, {"tree_attention", "cuda", "no CUDA backend"});
}
#endif

}  // namespace
}  // namespace hydragen::testing
