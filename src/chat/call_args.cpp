#include "chat/call_args.h"

namespace hydragen::chat {

std::vector<std::optional<Value>> bind_args(const std::string& function, const Args& args,
                                            const std::vector<const char*>& names) {
  if (args.positional.size() > names.size()) {
    throw EvalError(function + "() takes at most " + std::to_string(names.size()) + " argument(s), got " +
                    std::to_string(args.positional.size()));
  }
  std::vector<std::optional<Value>> bound(names.size());
  for (std::size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    std::size_t i = 0;
    while (i < names.size() && key != names[i]) ++i;
    if (i == names.size()) throw EvalError(function + "() got an unexpected keyword argument '" + key + "'");
    if (bound[i]) throw EvalError(function + "() got multiple values for argument '" + key + "'");
    bound[i] = value;
  }
  return bound;
}

}  // namespace hydragen::chat
