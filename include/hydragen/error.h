// hydragen::Error and the checks that raise it. Every public entry point validates its
// inputs and throws an Error whose message names the argument and what was expected.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace hydragen {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates its arguments with operator<< into one message.
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(concat(parts...));
}

}  // namespace hydragen

// HG_CHECK(cond, "attend: q must be [T, Hq, d], got ", q.shape_str());
#define HG_CHECK(cond, ...)                \
  do {                                     \
    if (!(cond)) ::hydragen::fail(__VA_ARGS__); \
  } while (0)
