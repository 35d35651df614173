// The callable values (functions, bound methods, macros) and the `loop` object of a for loop.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "chat/call_args.h"
#include "chat/scope.h"
#include "chat/value.h"

namespace hydragen::chat {

class Renderer;
struct MacroStmt;

using BuiltinFn = Value (*)(Renderer& r, const Args& args);

struct Callable {
  enum class Kind { Builtin, Method, Macro };
  Kind kind = Kind::Builtin;
  std::string name;
  BuiltinFn builtin = nullptr;     // Kind::Builtin
  Value self;                      // Kind::Method: the object the method belongs to
  const MacroStmt* macro = nullptr;  // Kind::Macro, with the scope it was defined in
  std::shared_ptr<Scope> closure;
};

// One iteration's view of a for loop (loop.index, loop.first, loop.cycle(...), ...).
struct LoopData {
  std::vector<Value> items;
  std::size_t index0 = 0;
  int depth = 1;
  bool has_changed_value = false;  // loop.changed(...) remembers the last value it saw
  Value changed_value;
};

}  // namespace hydragen::chat
