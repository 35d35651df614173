#include "chat/operators.h"

#include <cmath>
#include <limits>

#include "chat/builtins.h"
#include "chat/callable.h"
#include "chat/python_text.h"
#include "chat/unicode.h"

namespace hydragen::chat {

namespace {

[[noreturn]] void overflow() {
  throw EvalError("integer overflow (Python's integers are unbounded, these are 64-bit)");
}

[[noreturn]] void unsupported(const char* op, const Value& a, const Value& b) {
  throw EvalError(std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" +
                  b.type_name() + "'");
}

// a op b on 64-bit integers, or an EvalError where Python would need a bigger integer.
template <class Op>
std::int64_t checked(Op op, std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (op(a, b, &r)) overflow();
  return r;
}

bool add(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul(std::int64_t a, std::int64_t b, std::int64_t* r) { return __builtin_mul_overflow(a, b, r); }

// CPython's float floor division and modulo (the result's sign follows the divisor).
std::pair<double, double> float_divmod(double a, double b) {
  if (b == 0) throw EvalError("float division by zero");
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

std::pair<std::int64_t, std::int64_t> int_divmod(std::int64_t a, std::int64_t b) {
  if (b == 0) throw EvalError("integer division or modulo by zero");
  if (a == std::numeric_limits<std::int64_t>::min() && b == -1) overflow();
  std::int64_t q = a / b, r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) {
    r += b;
    q -= 1;
  }
  return {q, r};
}

std::int64_t int_pow(std::int64_t base, std::int64_t exp) {
  std::int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) result = checked(mul, result, base);
    exp >>= 1;
    if (exp > 0) base = checked(mul, base, base);
  }
  return result;
}

Value repeat(const Value& seq, std::int64_t n, const RenderLimits& limits) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const std::string& s = seq.str();
    if (!s.empty() && static_cast<std::uint64_t>(n) > limits.max_output_bytes / s.size()) {
      throw EvalError("the repeated string would pass the output limit of " + std::to_string(limits.max_output_bytes) + " bytes");
    }
    std::string out;
    out.reserve(s.size() * static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) out += s;
    return Value(std::move(out), seq.is_markup());
  }
  const std::vector<Value>& items = seq.items();
  if (!items.empty() && static_cast<std::uint64_t>(n) > limits.max_items / items.size()) {
    throw EvalError("the repeated list would pass the limit of " + std::to_string(limits.max_items) + " items");
  }
  std::vector<Value> out;
  out.reserve(items.size() * static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.list().kind);
}

bool is_plain_list(const Value& v, ListKind kind) { return v.is_list() && v.list().kind == kind; }

// -1, 0, 1 for int vs double; nullopt when d is NaN.
std::optional<int> compare_int_double(std::int64_t i, double d) {
  if (std::isnan(d)) return std::nullopt;
  if (d >= 9223372036854775808.0) return -1;
  if (d < -9223372036854775808.0) return 1;
  const double t = std::trunc(d);
  const auto ti = static_cast<std::int64_t>(t);
  if (i != ti) return i < ti ? -1 : 1;
  return d > t ? -1 : d < t ? 1 : 0;
}

// Python's ordering; nullopt when the types have none (a TypeError there).
std::optional<int> order(const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer()) return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    if (a.is_float() && b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      if (std::isnan(x) || std::isnan(y)) return 2;  // unordered: every comparison is false
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const auto c = a.is_float() ? compare_int_double(b.as_int(), a.as_double()) : compare_int_double(a.as_int(), b.as_double());
    if (!c) return 2;
    return a.is_float() ? -*c : *c;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list().kind == b.list().kind &&
      (a.list().kind == ListKind::List || a.list().kind == ListKind::Tuple)) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i])) continue;
      return py_less(x[i], y[i]) ? -1 : 1;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  return std::nullopt;
}

bool ordered(CmpOp op, const Value& a, const Value& b) {
  const auto c = order(a, b);
  if (!c) {
    static const char* kNames[] = {"==", "!=", "<", "<=", ">", ">="};
    throw EvalError(std::string("'") + kNames[static_cast<int>(op)] + "' is not supported between instances of '" +
                    a.type_name() + "' and '" + b.type_name() + "'");
  }
  if (*c == 2) return false;
  switch (op) {
    case CmpOp::Lt: return *c < 0;
    case CmpOp::Le: return *c <= 0;
    case CmpOp::Gt: return *c > 0;
    case CmpOp::Ge: return *c >= 0;
    default: return false;
  }
}

std::string object_name(const Value& obj) {
  if (obj.is_none()) return "'None'";
  std::string name = "'";
  name += obj.type_name();
  name += " object'";
  return name;
}

Value no_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(object_name(obj) + " has no attribute '" + name + "'");
}

Value method(const Value& self, const std::string& name) {
  auto c = std::make_shared<Callable>();
  c->kind = Callable::Kind::Method;
  c->name = name;
  c->self = self;
  return Value::callable(std::move(c));
}

Value loop_attr(const Value& loop, const std::string& name) {
  const LoopData& l = loop.loop();
  const auto n = static_cast<std::int64_t>(l.items.size());
  const auto i = static_cast<std::int64_t>(l.index0);
  if (name == "index") return Value(i + 1);
  if (name == "index0") return Value(i);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "length") return Value(n);
  if (name == "depth") return Value(static_cast<std::int64_t>(l.depth));
  if (name == "depth0") return Value(static_cast<std::int64_t>(l.depth - 1));
  if (name == "previtem") return i > 0 ? l.items[static_cast<std::size_t>(i - 1)] : Value::undefined("there is no previous item");
  if (name == "nextitem") return i + 1 < n ? l.items[static_cast<std::size_t>(i + 1)] : Value::undefined("there is no next item");
  if (name == "cycle" || name == "changed") return method(loop, name);
  return no_attribute(loop, name);
}

// markupsafe escapes the string arguments of Markup % args.
Value escape_args(const Value& args) {
  auto esc = [](const Value& v) { return v.is_string() && !v.is_markup() ? Value(html_escape(v.str()), true) : v; };
  if (args.is_list() && args.list().kind == ListKind::Tuple) {
    std::vector<Value> items;
    for (const Value& v : args.items()) items.push_back(esc(v));
    return Value::list(std::move(items), ListKind::Tuple);
  }
  if (args.is_dict()) {
    Dict d;
    for (const auto& [k, v] : args.dict().entries()) d.set(k, esc(v));
    return Value::dict(std::move(d));
  }
  return esc(args);
}

bool is_dunder(const std::string& name) {
  return name.size() > 4 && name.compare(0, 2, "__") == 0 && name.compare(name.size() - 2, 2, "__") == 0;
}

// Python's slice.indices(length) for one bound.
std::int64_t slice_bound(const Value& v, std::int64_t len, std::int64_t step, bool is_start) {
  if (v.is_none() || v.is_undefined()) return is_start ? (step < 0 ? len - 1 : 0) : (step < 0 ? -1 : len);
  std::int64_t i = v.as_int();
  if (i < 0) {
    i += len;
    if (i < 0) i = step < 0 ? -1 : 0;
  } else if (i >= len) {
    i = step < 0 ? len - 1 : len;
  }
  return i;
}

}  // namespace

std::string undefined_message(const Value& v) {
  const std::string& hint = v.undefined_hint();
  return hint.empty() ? "a value is undefined" : hint;
}

void require_defined(const Value& v) {
  if (v.is_undefined()) throw EvalError(undefined_message(v));
}

Value binary_op(BinOp op, const Value& a, const Value& b, const RenderLimits& limits) {
  require_defined(a);
  require_defined(b);
  const bool ints = a.is_integer() && b.is_integer();
  const bool numbers = a.is_number() && b.is_number();
  switch (op) {
    case BinOp::Add: {
      if (ints) return Value(checked(add, a.as_int(), b.as_int()));
      if (numbers) return Value(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        if (a.str().size() + b.str().size() > limits.max_output_bytes) {
          throw EvalError("the joined string would pass the output limit of " + std::to_string(limits.max_output_bytes) + " bytes");
        }
        const bool markup = a.is_markup() || b.is_markup();  // Markup escapes the plain side
        std::string left = markup && !a.is_markup() ? html_escape(a.str()) : a.str();
        left += markup && !b.is_markup() ? html_escape(b.str()) : b.str();
        return Value(std::move(left), markup);
      }
      for (ListKind k : {ListKind::List, ListKind::Tuple}) {
        if (is_plain_list(a, k) && is_plain_list(b, k)) {
          if (a.items().size() + b.items().size() > limits.max_items) {
            throw EvalError("the joined list would pass the limit of " + std::to_string(limits.max_items) + " items");
          }
          std::vector<Value> items = a.items();
          items.insert(items.end(), b.items().begin(), b.items().end());
          return Value::list(std::move(items), k);
        }
      }
      unsupported("+", a, b);
    }
    case BinOp::Sub: {
      if (ints) return Value(checked(sub, a.as_int(), b.as_int()));
      if (numbers) return Value(a.as_double() - b.as_double());
      unsupported("-", a, b);
    }
    case BinOp::Mul: {
      if (ints) return Value(checked(mul, a.as_int(), b.as_int()));
      if (numbers) return Value(a.as_double() * b.as_double());
      auto sequence = [](const Value& v) {
        return v.is_string() || is_plain_list(v, ListKind::List) || is_plain_list(v, ListKind::Tuple);
      };
      if (sequence(a) && b.is_integer()) return repeat(a, b.as_int(), limits);
      if (a.is_integer() && sequence(b)) return repeat(b, a.as_int(), limits);
      unsupported("*", a, b);
    }
    case BinOp::Div:
      if (!numbers) unsupported("/", a, b);
      if (b.as_double() == 0) throw EvalError("division by zero");
      return Value(a.as_double() / b.as_double());
    case BinOp::FloorDiv:
      if (ints) return Value(int_divmod(a.as_int(), b.as_int()).first);
      if (numbers) return Value(float_divmod(a.as_double(), b.as_double()).first);
      unsupported("//", a, b);
    case BinOp::Mod:
      if (ints) return Value(int_divmod(a.as_int(), b.as_int()).second);
      if (numbers) return Value(float_divmod(a.as_double(), b.as_double()).second);
      if (a.is_string()) {
        std::string out = percent_format(a.str(), a.is_markup() ? escape_args(b) : b);
        if (out.size() > limits.max_output_bytes) throw EvalError("the formatted string passes the output limit");
        return Value(std::move(out), a.is_markup());
      }
      unsupported("%", a, b);
    case BinOp::Pow: {
      if (ints && b.as_int() >= 0) return Value(int_pow(a.as_int(), b.as_int()));
      if (!numbers) unsupported("** or pow()", a, b);
      const double x = a.as_double(), y = b.as_double();
      if (x == 0 && y < 0) throw EvalError("0.0 cannot be raised to a negative power");
      if (x < 0 && y != std::floor(y)) throw EvalError("a negative number to a fractional power is complex");
      return Value(std::pow(x, y));
    }
  }
  return Value();
}

Value negate(const Value& v, bool minus) {
  require_defined(v);
  if (v.is_float()) return Value(minus ? -v.as_double() : v.as_double());
  if (v.is_integer()) {
    if (!minus) return Value(v.as_int());
    if (v.as_int() == std::numeric_limits<std::int64_t>::min()) overflow();
    return Value(-v.as_int());
  }
  throw EvalError(std::string("bad operand type for unary ") + (minus ? "-" : "+") + ": '" + v.type_name() + "'");
}

bool compare_op(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::Eq: return py_equal(a, b);
    case CmpOp::Ne: return !py_equal(a, b);
    case CmpOp::In: return py_contains(b, a);
    case CmpOp::NotIn: return !py_contains(b, a);
    default: return ordered(op, a, b);
  }
}

bool py_less(const Value& a, const Value& b) { return ordered(CmpOp::Lt, a, b); }

bool py_contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::Undefined: return false;
    case ValueKind::String:
      if (!item.is_string()) {
        throw EvalError("'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.str().find(item.str()) != std::string::npos;
    case ValueKind::List:
      for (const Value& v : container.items()) {
        if (py_equal(v, item)) return true;
      }
      return false;
    case ValueKind::Dict:
      if (Dict::key_of(item).empty()) throw EvalError("unhashable type: '" + item.type_name() + "'");
      return container.dict().find(item) != nullptr;
    case ValueKind::Iterator: {
      IteratorData& it = container.iterator();
      while (it.next < it.items.size()) {
        if (py_equal(it.items[it.next++], item)) return true;
      }
      return false;
    }
    default: throw EvalError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (is_dunder(name)) return no_attribute(obj, name);
  if (is_unsafe_method(obj, name)) {
    return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe");
  }
  if (has_method(obj, name)) return method(obj, name);
  switch (obj.kind()) {
    case ValueKind::Dict: {
      const Value* v = obj.dict().find(std::string_view(name));
      return v ? *v : no_attribute(obj, name);
    }
    case ValueKind::Namespace: {
      const Value* v = obj.ns().attrs.find(std::string_view(name));
      return v ? *v : no_attribute(obj, name);
    }
    case ValueKind::Loop: return loop_attr(obj, name);
    case ValueKind::Bool:
    case ValueKind::Int:
    case ValueKind::Float:
      if (name == "real") return obj.is_float() ? Value(obj.as_double()) : Value(obj.as_int());
      if (name == "imag") return obj.is_float() ? Value(0.0) : Value(0);
      return no_attribute(obj, name);
    default: return no_attribute(obj, name);
  }
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  switch (obj.kind()) {
    case ValueKind::Dict:
      if (const Value* v = obj.dict().find(key)) return *v;
      break;
    case ValueKind::List: {
      const ListKind k = obj.list().kind;
      if (key.is_integer() && (k == ListKind::List || k == ListKind::Tuple || k == ListKind::Range)) {
        const auto n = static_cast<std::int64_t>(obj.items().size());
        std::int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) return obj.items()[static_cast<std::size_t>(i)];
        return Value::undefined(object_name(obj) + " has no element " + py_repr(key));
      }
      break;
    }
    case ValueKind::String:
      if (key.is_integer()) {
        const std::vector<char32_t> cps = code_points(obj.str());
        const auto n = static_cast<std::int64_t>(cps.size());
        std::int64_t i = key.as_int();
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          std::string c;
          append_utf8(c, cps[static_cast<std::size_t>(i)]);
          return Value(std::move(c), obj.is_markup());
        }
        return Value::undefined(object_name(obj) + " has no element " + py_repr(key));
      }
      break;
    default: break;
  }
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined(object_name(obj) + " has no element " + py_repr(key));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  for (const Value* v : {&start, &stop, &step}) {
    if (!v->is_none() && !v->is_undefined() && !v->is_integer()) return Value::undefined("slice indices must be integers");
  }
  const std::int64_t st = step.is_integer() ? step.as_int() : 1;
  if (st == 0) throw EvalError("slice step cannot be zero");
  const bool is_str = obj.is_string();
  const bool is_seq = obj.is_list() && (obj.list().kind == ListKind::List || obj.list().kind == ListKind::Tuple ||
                                        obj.list().kind == ListKind::Range);
  if (!is_str && !is_seq) return Value::undefined(object_name(obj) + " cannot be sliced");
  std::vector<char32_t> cps;
  if (is_str) cps = code_points(obj.str());
  const auto len = static_cast<std::int64_t>(is_str ? cps.size() : obj.items().size());
  const std::int64_t a = slice_bound(start, len, st, true);
  const std::int64_t b = slice_bound(stop, len, st, false);
  std::vector<std::size_t> picks;
  for (std::int64_t i = a; st > 0 ? i < b : i > b; i += st) picks.push_back(static_cast<std::size_t>(i));
  if (is_str) {
    std::string out;
    for (std::size_t i : picks) append_utf8(out, cps[i]);
    return Value(std::move(out), obj.is_markup());
  }
  std::vector<Value> items;
  items.reserve(picks.size());
  for (std::size_t i : picks) items.push_back(obj.items()[i]);
  if (obj.list().kind != ListKind::Range) return Value::list(std::move(items), obj.list().kind);
  const ListData& r = obj.list();  // CPython: range(start + a*step, start + b*step, step*st)
  Value sliced = Value::range(r.start + a * r.step, r.start + b * r.step, r.step * st);
  return sliced;
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case ValueKind::Undefined: return {};
    case ValueKind::List: return v.items();
    case ValueKind::Dict: {
      std::vector<Value> keys;
      keys.reserve(v.dict().size());
      for (const auto& [k, val] : v.dict().entries()) keys.push_back(k);
      return keys;
    }
    case ValueKind::String: {
      std::vector<Value> chars;
      for (char32_t c : code_points(v.str())) {
        std::string s;
        append_utf8(s, c);
        chars.emplace_back(std::move(s), v.is_markup());
      }
      return chars;
    }
    case ValueKind::Iterator: {
      IteratorData& it = v.iterator();
      std::vector<Value> rest(it.items.begin() + static_cast<std::ptrdiff_t>(it.next), it.items.end());
      it.next = it.items.size();
      return rest;
    }
    default: throw EvalError("'" + v.type_name() + "' object is not iterable");
  }
}

std::int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case ValueKind::Undefined: return 0;
    case ValueKind::String: return static_cast<std::int64_t>(code_point_count(v.str()));
    case ValueKind::List: return static_cast<std::int64_t>(v.items().size());
    case ValueKind::Dict: return static_cast<std::int64_t>(v.dict().size());
    case ValueKind::Loop: return static_cast<std::int64_t>(v.loop().items.size());
    default: throw EvalError("object of type '" + v.type_name() + "' has no len()");
  }
}

}  // namespace hydragen::chat
