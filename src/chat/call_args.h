// The arguments of a call to a filter, test, function, method or macro, and Python's way of
// binding them to named parameters.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace hydragen::chat {

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Binds `args` to the parameters `names` of `function` as Python does: positional first, then
// by keyword. Unset parameters are nullopt. Too many arguments, an unknown or a repeated
// keyword is an EvalError naming the function.
std::vector<std::optional<Value>> bind_args(const std::string& function, const Args& args,
                                            const std::vector<const char*>& names);

// The bound value when set, else `fallback`.
inline Value arg_or(const std::optional<Value>& bound, Value fallback) {
  return bound ? *bound : std::move(fallback);
}

}  // namespace hydragen::chat
