// Python's text forms of values: str() (what {{ x }} prints), repr() (how lists and dicts
// print their items), float repr, and markupsafe's HTML escape.
#pragma once

#include <string>
#include <string_view>

#include "chat/value.h"

namespace hydragen::chat {

// str(v). An undefined value prints as "". Generators, functions and methods, whose Python
// text holds a memory address, are an EvalError instead of a prompt that differs per run.
std::string py_str(const Value& v);
std::string py_repr(const Value& v);
std::string float_repr(double d);
std::string string_repr(std::string_view s);  // repr() of a str
std::string html_escape(std::string_view s);  // markupsafe.escape: & < > ' "

}  // namespace hydragen::chat
