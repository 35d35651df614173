// A stable merge sort that only needs `less` to answer (Python's sorted() is stable, and its
// comparisons may throw or be inconsistent, as with NaN, without harm).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace hydragen::chat {

template <class T, class Less>
void merge_sort(std::vector<T>& v, Less less) {
  std::vector<T> buffer(v.size());
  for (std::size_t width = 1; width < v.size(); width *= 2) {
    for (std::size_t lo = 0; lo < v.size(); lo += 2 * width) {
      const std::size_t mid = std::min(lo + width, v.size());
      const std::size_t hi = std::min(lo + 2 * width, v.size());
      std::size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) buffer[k++] = less(v[j], v[i]) ? std::move(v[j++]) : std::move(v[i++]);
      while (i < mid) buffer[k++] = std::move(v[i++]);
      while (j < hi) buffer[k++] = std::move(v[j++]);
    }
    std::swap(v, buffer);
  }
}

}  // namespace hydragen::chat
