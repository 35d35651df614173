// PagePool: the allocator of the K/V page ids. A page holds `page_size` tokens of K and V
// (the storage itself lives with the backend); this class only says which ids are in use
// and by how many owners. A page is shared when two radix-tree nodes split inside it, so
// every page carries a refcount and returns to the free list when it drops to 0.
//
// Allocation order is deterministic: a LIFO free list that starts as 0, 1, 2, ... (a fresh
// pool hands out the lowest ids first; afterwards the most recently freed page comes first).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace hydragen::kv {

class PagePool {
 public:
  // num_pages >= 0 (ids must fit in int32), page_size > 0 tokens per page.
  PagePool(std::int64_t num_pages, int page_size);

  int page_size() const { return page_size_; }
  std::int64_t num_pages() const { return static_cast<std::int64_t>(refcounts_.size()); }
  std::int64_t free_pages() const { return static_cast<std::int64_t>(free_list_.size()); }
  std::int64_t used_pages() const { return num_pages() - free_pages(); }
  // The most pages ever in use at once since construction.
  std::int64_t peak_used_pages() const { return peak_used_; }

  // All or nothing: `count` (>= 0) fresh pages with refcount 1, or std::nullopt (the pool
  // unchanged) when fewer are free.
  std::optional<std::vector<std::int32_t>> allocate(std::int64_t count);
  // refcount + 1; the page must be in use (a free page is only handed out by allocate).
  void retain(std::int32_t page);
  // refcount - 1; at 0 the page is free again. Throws on a bad id or a free page.
  void release(std::int32_t page);
  // Releases each listed page once (a page may be listed as often as it has references).
  // All or nothing: the whole list is checked before any page is released.
  void release(std::span<const std::int32_t> pages);
  int refcount(std::int32_t page) const;

 private:
  void check_id(std::int32_t page, const char* what) const;

  int page_size_;
  std::vector<int> refcounts_;             // by page id; 0 = free
  std::vector<std::int32_t> free_list_;    // back() is handed out next
  std::int64_t peak_used_ = 0;
};

}  // namespace hydragen::kv
