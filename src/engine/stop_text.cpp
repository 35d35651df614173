#include "engine/stop_text.h"

#include <algorithm>

namespace hydragen::engine {

StopStringFilter::StopStringFilter(std::vector<std::string> stops) {
  for (std::string& stop : stops)
    if (!stop.empty()) stops_.push_back(std::move(stop));
}

std::string StopStringFilter::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  std::size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, held_.find(stop));
  if (first != std::string::npos) {
    std::string out = held_.substr(0, first);
    held_.clear();
    stopped_ = true;
    return out;
  }
  // Hold the longest tail of held_ that is a proper prefix of some stop string; any stop
  // starting earlier would already be complete inside held_ and found above.
  std::size_t keep = 0;
  for (const std::string& stop : stops_)
    for (std::size_t k = std::min(held_.size(), stop.size() - 1); k > keep; --k)
      if (std::string_view(held_).substr(held_.size() - k) == std::string_view(stop).substr(0, k)) {
        keep = k;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStringFilter::finish() {
  if (stopped_) return {};
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace hydragen::engine
