// Python's semantics for what templates do with values: arithmetic, comparison, `in`,
// attribute and item access (jinja2's getattr-then-getitem and getitem-then-getattr),
// slicing and iteration. Errors are EvalError.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/template.h"
#include "chat/value.h"

namespace hydragen::chat {

// The message jinja2 gives when an undefined value is used.
std::string undefined_message(const Value& v);
// Throws EvalError when v is undefined.
void require_defined(const Value& v);

Value binary_op(BinOp op, const Value& a, const Value& b, const RenderLimits& limits);
Value negate(const Value& v, bool minus);
bool compare_op(CmpOp op, const Value& a, const Value& b);
bool py_less(const Value& a, const Value& b);  // a < b, or EvalError when Python has no order
bool py_contains(const Value& container, const Value& item);

// obj.name: a method, a dict key, a namespace attribute, a loop attribute; undefined when
// there is none. An undefined obj is an error.
Value get_attr(const Value& obj, const std::string& name);
// obj[key] (an int, a str key, ...); undefined when there is none.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] of a str, list or tuple; undefined for other objects.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// The items `for x in v` sees: a list's items, a dict's keys, a str's characters, nothing for
// undefined. Takes the remaining items of an iterator.
std::vector<Value> iterate(const Value& v);
// len(v), or EvalError.
std::int64_t py_len(const Value& v);

// str % args, printf-style as Python formats it.
std::string percent_format(const std::string& format, const Value& args);

}  // namespace hydragen::chat
