// The KV-cache bookkeeping (host only): PagePool refcounts and all-or-nothing allocation.
#include <gtest/gtest.h>

#include <string>

#include "hydragen/error.h"
#include "kv/page_pool.h"

namespace hydragen::kv {
namespace {

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

}  // namespace
}  // namespace hydragen::kv
