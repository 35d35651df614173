// StopStringFilter: streamed text with stop strings. push() returns the text that is safe
// to show: everything except a tail that could still grow into a stop string. Once a stop
// string appears, the text before it is released, the rest is dropped and stopped() is true
// (what OpenAI-style APIs return: the completion without its stop string). finish() releases
// what is still held when generation ends for another reason.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hydragen::engine {

class StopStringFilter {
 public:
  explicit StopStringFilter(std::vector<std::string> stops);
  std::string push(std::string_view text);
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;  // non-empty ones
  std::string held_;
  bool stopped_ = false;
};

}  // namespace hydragen::engine
