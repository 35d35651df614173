// Jinja's tests (`x is defined`, `x is divisibleby 3`, ...) and their registry.
#include <algorithm>
#include <string_view>

#include "chat/builtins.h"
#include "chat/callable.h"
#include "chat/operators.h"
#include "chat/python_text.h"
#include "chat/renderer.h"
#include "chat/unicode.h"

namespace hydragen::chat {

namespace {

// The test's one argument after the value.
Value other(const std::string& test, const Args& args) {
  const auto a = bind_args(test, args, {"other"});
  if (!a[0]) throw EvalError("the test '" + test + "' needs an argument");
  return *a[0];
}

void no_args(const std::string& test, const Args& args) { bind_args(test, args, {}); }

bool mod_equals(Renderer& r, const Value& v, const Value& divisor, std::int64_t remainder) {
  return py_equal(binary_op(BinOp::Mod, v, divisor, r.limits()), Value(remainder));
}

#define TEST(name) bool name([[maybe_unused]] Renderer& r, const Value& v, const Args& args)

TEST(test_odd) { return no_args("odd", args), mod_equals(r, v, Value(2), 1); }
TEST(test_even) { return no_args("even", args), mod_equals(r, v, Value(2), 0); }
TEST(test_divisibleby) { return mod_equals(r, v, other("divisibleby", args), 0); }
TEST(test_defined) { return no_args("defined", args), !v.is_undefined(); }
TEST(test_undefined) { return no_args("undefined", args), v.is_undefined(); }
TEST(test_filter) { return no_args("filter", args), v.is_string() && find_filter(v.str()) != nullptr; }
TEST(test_test) { return no_args("test", args), v.is_string() && find_test(v.str()) != nullptr; }
TEST(test_none) { return no_args("none", args), v.is_none(); }
TEST(test_boolean) { return no_args("boolean", args), v.is_bool(); }
TEST(test_false) { return no_args("false", args), v.is_bool() && !v.as_bool(); }
TEST(test_true) { return no_args("true", args), v.is_bool() && v.as_bool(); }
TEST(test_integer) { return no_args("integer", args), v.is_int(); }
TEST(test_float) { return no_args("float", args), v.is_float(); }
TEST(test_lower) { return no_args("lower", args), py_islower(py_str(v)); }
TEST(test_upper) { return no_args("upper", args), py_isupper(py_str(v)); }
TEST(test_string) { return no_args("string", args), v.is_string(); }
TEST(test_mapping) { return no_args("mapping", args), v.is_dict(); }
TEST(test_number) { return no_args("number", args), v.is_number(); }
TEST(test_escaped) { return no_args("escaped", args), v.is_markup(); }

// len() and [] both work: str, list, tuple, range, dict, and jinja2's Undefined.
TEST(test_sequence) {
  no_args("sequence", args);
  if (v.is_list()) {
    const ListKind k = v.list().kind;
    return k == ListKind::List || k == ListKind::Tuple || k == ListKind::Range;
  }
  return v.is_string() || v.is_dict() || v.is_undefined();
}

TEST(test_iterable) {
  no_args("iterable", args);
  return v.is_list() || v.is_dict() || v.is_string() || v.is_iterator() || v.is_undefined() || v.is_loop();
}

TEST(test_callable) { return no_args("callable", args), v.is_callable() || v.is_undefined() || v.is_loop(); }

// `is` identity: None and the booleans are singletons, CPython caches the small integers, and a
// container is itself.
TEST(test_sameas) {
  const Value o = other("sameas", args);
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case ValueKind::None: return true;
    case ValueKind::Bool: return v.as_bool() == o.as_bool();
    case ValueKind::Int: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case ValueKind::List: return &v.list() == &o.list();
    case ValueKind::Dict: return &v.dict() == &o.dict();
    case ValueKind::Namespace:
    case ValueKind::Iterator:
    case ValueKind::Callable:
    case ValueKind::Loop: return py_equal(v, o);
    default: return false;
  }
}

TEST(test_in) { return py_contains(other("in", args), v); }
TEST(test_eq) { return compare_op(CmpOp::Eq, v, other("==", args)); }
TEST(test_ne) { return compare_op(CmpOp::Ne, v, other("!=", args)); }
TEST(test_gt) { return compare_op(CmpOp::Gt, v, other(">", args)); }
TEST(test_ge) { return compare_op(CmpOp::Ge, v, other(">=", args)); }
TEST(test_lt) { return compare_op(CmpOp::Lt, v, other("<", args)); }
TEST(test_le) { return compare_op(CmpOp::Le, v, other("<=", args)); }

#undef TEST

constexpr Named<TestFn> kTests[] = {
    {"odd", test_odd}, {"even", test_even}, {"divisibleby", test_divisibleby}, {"defined", test_defined},
    {"undefined", test_undefined}, {"filter", test_filter}, {"test", test_test}, {"none", test_none},
    {"boolean", test_boolean}, {"false", test_false}, {"true", test_true}, {"integer", test_integer},
    {"float", test_float}, {"lower", test_lower}, {"upper", test_upper}, {"string", test_string},
    {"mapping", test_mapping}, {"number", test_number}, {"sequence", test_sequence}, {"iterable", test_iterable},
    {"callable", test_callable}, {"sameas", test_sameas}, {"escaped", test_escaped}, {"in", test_in},
    {"==", test_eq}, {"eq", test_eq}, {"equalto", test_eq}, {"!=", test_ne}, {"ne", test_ne}, {">", test_gt},
    {"gt", test_gt}, {"greaterthan", test_gt}, {"ge", test_ge}, {">=", test_ge}, {"<", test_lt}, {"lt", test_lt},
    {"lessthan", test_lt}, {"<=", test_le}, {"le", test_le},
};

}  // namespace

TestFn find_test(std::string_view name) {
  return find_named(kTests, name);
}

}  // namespace hydragen::chat
