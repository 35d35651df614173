// The builtin filters (x|trim), tests (x is defined), global functions (range, namespace,
// raise_exception, strftime_now, ...) and the methods of str, dict and list values.
#pragma once

#include <string>
#include <string_view>

#include "chat/call_args.h"
#include "chat/callable.h"
#include "chat/value.h"

namespace hydragen::chat {

class Renderer;

using FilterFn = Value (*)(Renderer& r, const Value& input, const Args& args);
using TestFn = bool (*)(Renderer& r, const Value& input, const Args& args);

FilterFn find_filter(std::string_view name);  // nullptr when there is no such filter
TestFn find_test(std::string_view name);
BuiltinFn find_global(std::string_view name);

// Whether `self.name` is a method (str.strip, dict.items, ...). A mutating method of a dict or
// list is not one: the sandbox transformers uses refuses them.
bool has_method(const Value& self, std::string_view name);
// A method the sandbox refuses (dict.pop, list.append, ...): reading it gives an undefined value.
bool is_unsafe_method(const Value& self, std::string_view name);
Value call_method(Renderer& r, const Value& self, const std::string& name, const Args& args);

// A builtin's name and function; find_named looks a name up in a table of them.
template <class Fn>
struct Named {
  std::string_view name;
  Fn fn;
};

template <class Fn, std::size_t N>
Fn find_named(const Named<Fn> (&table)[N], std::string_view name) {
  for (const Named<Fn>& e : table) {
    if (e.name == name) return e.fn;
  }
  return nullptr;
}

}  // namespace hydragen::chat
