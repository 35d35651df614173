// hydragen::Error and the checks that raise it. Every public entry point validates its
// inputs and throws an Error whose message names the argument and what was expected.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace hydragen {

std::string utf8_lossy(std::string_view bytes);  // src/core/utf8.h

class Error : public std::runtime_error {
 public:
  // Messages quote outside input (a file's bytes, a request line): invalid UTF-8 in it becomes
  // U+FFFD, so an error can always be printed or written as JSON.
  explicit Error(const std::string& message) : std::runtime_error(utf8_lossy(message)) {}
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
