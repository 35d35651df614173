#include "kv/page_pool.h"

#include <algorithm>
#include <limits>

#include "hydragen/error.h"

namespace hydragen::kv {

PagePool::PagePool(std::int64_t num_pages, int page_size) : page_size_(page_size) {
  HG_CHECK(num_pages >= 0, "PagePool: num_pages must be >= 0, got ", num_pages);
  HG_CHECK(num_pages <= std::int64_t{std::numeric_limits<std::int32_t>::max()} + 1,
           "PagePool: num_pages must fit int32 page ids (<= 2^31), got ", num_pages);
  HG_CHECK(page_size > 0, "PagePool: page_size must be > 0 tokens, got ", page_size);
  refcounts_.assign(static_cast<std::size_t>(num_pages), 0);
  free_list_.resize(static_cast<std::size_t>(num_pages));
  // Highest id at the bottom of the stack, so a fresh pool hands out 0, 1, 2, ...
  for (std::int64_t i = 0; i < num_pages; ++i) {
    free_list_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(num_pages - 1 - i);
  }
}

void PagePool::check_id(std::int32_t page, const char* what) const {
  HG_CHECK(page >= 0 && page < num_pages(), "PagePool::", what, ": page must be in [0, ",
           num_pages(), "), got ", page);
}

std::optional<std::vector<std::int32_t>> PagePool::allocate(std::int64_t count) {
  HG_CHECK(count >= 0, "PagePool::allocate: count must be >= 0, got ", count);
  if (count > free_pages()) return std::nullopt;
  std::vector<std::int32_t> pages(static_cast<std::size_t>(count));
  for (auto& page : pages) {
    page = free_list_.back();
    free_list_.pop_back();
    refcounts_[static_cast<std::size_t>(page)] = 1;
  }
  peak_used_ = std::max(peak_used_, used_pages());
  return pages;
}

void PagePool::retain(std::int32_t page) {
  check_id(page, "retain");
  int& count = refcounts_[static_cast<std::size_t>(page)];
  HG_CHECK(count > 0, "PagePool::retain: page ", page, " must be in use, but it is free");
  ++count;
}

void PagePool::release(std::int32_t page) { release(std::span<const std::int32_t>(&page, 1)); }

void PagePool::release(std::span<const std::int32_t> pages) {
  // Check first (a page listed n times needs n references), so a bad list changes nothing.
  std::vector<std::int32_t> sorted(pages.begin(), pages.end());
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size();) {
    const std::int32_t page = sorted[i];
    check_id(page, "release");
    std::size_t j = i;
    while (j < sorted.size() && sorted[j] == page) ++j;
    const int held = refcounts_[static_cast<std::size_t>(page)];
    HG_CHECK(static_cast<std::size_t>(held) >= j - i, "PagePool::release: page ", page,
             held == 0 ? " is already free" : " released more often than it is referenced",
             " (refcount ", held, ", listed ", j - i, " times)");
    i = j;
  }
  for (const std::int32_t page : pages) {
    if (--refcounts_[static_cast<std::size_t>(page)] == 0) free_list_.push_back(page);
  }
}

int PagePool::refcount(std::int32_t page) const {
  check_id(page, "refcount");
  return refcounts_[static_cast<std::size_t>(page)];
}

}  // namespace hydragen::kv
