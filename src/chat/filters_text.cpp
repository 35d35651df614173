// Filters on text and numbers: trim, upper, title, indent, replace, tojson, int, round, ...
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "chat/filter_impl.h"
#include "chat/json_values.h"
#include "chat/operators.h"
#include "chat/python_text.h"
#include "chat/renderer.h"
#include "chat/string_ops.h"
#include "chat/unicode.h"

namespace hydragen::chat {

namespace {

std::int64_t int_arg(const std::string& filter, const char* name, const Value& v) {
  if (!v.is_integer()) throw EvalError(filter + ": " + name + " must be an integer, got " + v.type_name());
  return v.as_int();
}

// Python's grammar of int(text, base) and float(text): digits with single underscores between.
bool valid_digits(std::string_view s, int base) {
  if (s.empty() || s.front() == '_' || s.back() == '_') return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (s[i + 1] == '_') return false;
      continue;
    }
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : c >= 'A' && c <= 'Z' ? c - 'A' + 10 : 99;
    if (d >= base) return false;
  }
  return true;
}

std::string without(std::string_view s, char c) {
  std::string out;
  for (char x : s) {
    if (x != c) out += x;
  }
  return out;
}

// int(text, base), or nullopt where Python raises ValueError.
std::optional<std::int64_t> parse_int(const std::string& text, std::int64_t base) {
  if (base != 0 && (base < 2 || base > 36)) throw EvalError("int() base must be >= 2 and <= 36, or 0");
  std::string_view s = text;
  const std::string stripped = py_strip(s, std::nullopt, true, true);
  s = stripped;
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  int b = static_cast<int>(base);
  if (s.size() >= 2 && s[0] == '0') {
    const char p = static_cast<char>(s[1] | 0x20);
    const int prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed != 0 && (b == 0 || b == prefixed)) {
      b = prefixed;
      s.remove_prefix(2);
      if (!s.empty() && s[0] == '_') s.remove_prefix(1);
    }
  }
  if (b == 0) {
    b = 10;
    if (s.size() > 1 && s[0] == '0' && without(s, '_').find_first_not_of('0') != std::string::npos) return std::nullopt;
  }
  if (!valid_digits(s, b)) return std::nullopt;
  const std::string digits = without(s, '_');
  errno = 0;
  char* end = nullptr;
  const unsigned long long magnitude = std::strtoull(digits.c_str(), &end, b);
  if (errno == ERANGE || magnitude > static_cast<unsigned long long>(std::numeric_limits<std::int64_t>::max()) + (negative ? 1 : 0)) {
    throw EvalError("int: " + text + " does not fit 64 bits");
  }
  return negative ? static_cast<std::int64_t>(0ULL - magnitude) : static_cast<std::int64_t>(magnitude);
}

// float(text), or nullopt where Python raises ValueError.
std::optional<double> parse_float(const std::string& text) {
  const std::string stripped = py_strip(text, std::nullopt, true, true);
  std::string_view s = stripped;
  std::string_view body = s;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) body.remove_prefix(1);
  std::string lower;
  for (char c : body) lower += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
  const bool negative = !s.empty() && s[0] == '-';
  if (lower == "inf" || lower == "infinity") return negative ? -INFINITY : INFINITY;
  if (lower == "nan") return NAN;
  // digits [. digits] [e [sign] digits], each run of digits with underscores between digits
  std::size_t e = lower.find('e');
  std::string_view mantissa = std::string_view(lower).substr(0, e);
  std::string_view exponent = e == std::string::npos ? std::string_view() : std::string_view(lower).substr(e + 1);
  const std::size_t dot = mantissa.find('.');
  const std::string_view whole = mantissa.substr(0, dot);
  const std::string_view frac = dot == std::string_view::npos ? std::string_view() : mantissa.substr(dot + 1);
  if (whole.empty() && frac.empty()) return std::nullopt;
  if (!whole.empty() && !valid_digits(whole, 10)) return std::nullopt;
  if (!frac.empty() && !valid_digits(frac, 10)) return std::nullopt;
  if (e != std::string::npos) {
    if (!exponent.empty() && (exponent[0] == '+' || exponent[0] == '-')) exponent.remove_prefix(1);
    if (!valid_digits(exponent, 10)) return std::nullopt;
  }
  return std::strtod(without(s, '_').c_str(), nullptr);
}

}  // namespace

Value soft_str(const Value& v) { return v.is_string() ? v : Value(py_str(v)); }

Value filter_abs(Renderer&, const Value& input, const Args& args) {
  bind_args("abs", args, {});
  if (input.is_float()) return Value(std::fabs(input.as_double()));
  if (input.is_integer()) {
    if (input.as_int() == std::numeric_limits<std::int64_t>::min()) throw EvalError("abs: integer overflow");
    return Value(std::abs(input.as_int()));
  }
  throw EvalError("bad operand type for abs(): '" + input.type_name() + "'");
}

Value filter_capitalize(Renderer& r, const Value& input, const Args& args) {
  bind_args("capitalize", args, {});
  const Value s = soft_str(input);
  return r.text(py_capitalize(s.str()), s.is_markup());
}

Value filter_center(Renderer& r, const Value& input, const Args& args) {
  const auto a = bind_args("center", args, {"width"});
  const std::int64_t width = a[0] ? int_arg("center", "width", *a[0]) : 80;
  if (width > static_cast<std::int64_t>(r.limits().max_output_bytes)) throw EvalError("center: the width passes the output limit");
  const Value s = soft_str(input);
  return r.text(py_pad(s.str(), width, " ", '^'), s.is_markup());
}

Value filter_escape(Renderer&, const Value& input, const Args& args) {
  bind_args("escape", args, {});
  if (input.is_markup()) return input;
  return Value(html_escape(py_str(input)), true);
}

Value filter_forceescape(Renderer&, const Value& input, const Args& args) {
  bind_args("forceescape", args, {});
  return Value(html_escape(py_str(input)), true);
}

Value filter_float(Renderer&, const Value& input, const Args& args) {
  const auto a = bind_args("float", args, {"default"});
  const Value fallback = arg_or(a[0], Value(0.0));
  if (input.is_number()) return Value(input.as_double());
  if (input.is_string()) {
    if (const auto d = parse_float(input.str())) return Value(*d);
  }
  return fallback;
}

Value filter_format(Renderer& r, const Value& input, const Args& args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    throw EvalError("format: can't handle positional and keyword arguments at the same time");
  }
  const Value s = soft_str(input);
  Value values;
  if (!args.keyword.empty()) {
    Dict d;
    for (const auto& [k, v] : args.keyword) d.set(k, v);
    values = Value::dict(std::move(d));
  } else {
    values = Value::list(args.positional, ListKind::Tuple);
  }
  return binary_op(BinOp::Mod, s, values, r.limits());
}

Value filter_indent(Renderer& r, const Value& input, const Args& args) {
  const auto a = bind_args("indent", args, {"width", "first", "blank"});
  if (!input.is_string()) throw EvalError("indent: expected a string, got " + input.type_name());
  std::string indention;
  const Value width = arg_or(a[0], Value(4));
  if (width.is_string()) {
    indention = width.str();
  } else {
    const std::int64_t n = int_arg("indent", "width", width);
    if (n > static_cast<std::int64_t>(r.limits().max_output_bytes)) throw EvalError("indent: the width passes the output limit");
    indention.assign(static_cast<std::size_t>(std::max<std::int64_t>(0, n)), ' ');
  }
  const bool first = a[1] && a[1]->truthy();
  const bool blank = a[2] && a[2]->truthy();
  const std::vector<std::string> lines = py_splitlines(input.str() + "\n", false);
  std::string out;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? "" : lines[0];
    for (std::size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
      if (out.size() > r.limits().max_output_bytes) r.text(std::move(out));  // throws
    }
  }
  if (first) out = indention + out;
  return r.text(std::move(out), input.is_markup());
}

Value filter_int(Renderer&, const Value& input, const Args& args) {
  const auto a = bind_args("int", args, {"default", "base"});
  const Value fallback = arg_or(a[0], Value(0));
  const std::int64_t base = a[1] ? int_arg("int", "base", *a[1]) : 10;
  auto from_double = [&](double d) -> std::optional<Value> {
    if (std::isnan(d)) return std::nullopt;
    if (std::isinf(d)) throw EvalError("int: cannot convert float infinity to integer");
    if (std::fabs(d) >= 9223372036854775808.0) throw EvalError("int: the number does not fit 64 bits");
    return Value(static_cast<std::int64_t>(std::trunc(d)));
  };
  if (input.is_integer()) return Value(input.as_int());
  if (input.is_float()) {
    if (auto v = from_double(input.as_double())) return *v;
    return fallback;
  }
  if (input.is_string()) {
    if (const auto i = parse_int(input.str(), base)) return Value(*i);
    if (const auto d = parse_float(input.str())) {
      if (std::isinf(*d)) return fallback;
      if (auto v = from_double(*d)) return *v;
    }
  }
  return fallback;
}

Value filter_lower(Renderer& r, const Value& input, const Args& args) {
  bind_args("lower", args, {});
  const Value s = soft_str(input);
  return r.text(py_lower(s.str()), s.is_markup());
}

Value filter_upper(Renderer& r, const Value& input, const Args& args) {
  bind_args("upper", args, {});
  const Value s = soft_str(input);
  return r.text(py_upper(s.str()), s.is_markup());
}

Value filter_replace(Renderer& r, const Value& input, const Args& args) {
  const auto a = bind_args("replace", args, {"old", "new", "count"});
  if (!a[0] || !a[1]) throw EvalError("replace() needs the old and the new text");
  const std::int64_t count = a[2] && !a[2]->is_none() ? int_arg("replace", "count", *a[2]) : -1;
  return r.text(py_replace(py_str(input), py_str(*a[0]), py_str(*a[1]), count, r.limits().max_output_bytes));
}

Value filter_round(Renderer&, const Value& input, const Args& args) {
  const auto a = bind_args("round", args, {"precision", "method"});
  const std::int64_t precision = a[0] ? int_arg("round", "precision", *a[0]) : 0;
  const std::string method = a[1] ? py_str(*a[1]) : "common";
  if (method != "common" && method != "ceil" && method != "floor") throw EvalError("round: method must be common, ceil or floor");
  if (!input.is_number()) throw EvalError("round: expected a number, got " + input.type_name());
  if (precision < 0) throw EvalError("round: a negative precision is not supported");
  const double x = input.as_double();
  if (method != "common") {
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double y = method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale);
    return Value(y / scale);
  }
  if (input.is_integer()) return Value(input.as_int());
  if (!std::isfinite(x) || precision > 340) return Value(x);
  // Python rounds the exact decimal value half to even, as printf does.
  std::vector<char> buf(static_cast<std::size_t>(precision) + 400);
  std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(precision), x);
  return Value(std::strtod(buf.data(), nullptr));
}

Value filter_safe(Renderer&, const Value& input, const Args& args) {
  bind_args("safe", args, {});
  if (input.is_markup()) return input;
  return Value(py_str(input), true);
}

Value filter_string(Renderer&, const Value& input, const Args& args) {
  bind_args("string", args, {});
  return soft_str(input);
}

// jinja2's title: words start after '-', whitespace, '(', '{', '[' or '<'; the first letter of
// each goes upper, the rest lower.
Value filter_title(Renderer& r, const Value& input, const Args& args) {
  bind_args("title", args, {});
  const Value s = soft_str(input);
  const std::vector<char32_t> cps = code_points(s.str());
  auto separator = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  std::string out;
  for (std::size_t i = 0; i < cps.size();) {
    std::size_t j = i;
    const bool sep = separator(cps[i]);
    while (j < cps.size() && separator(cps[j]) == sep) ++j;
    std::string first;
    append_utf8(first, cps[i]);
    out += py_upper(first);
    out += py_lower(to_utf8(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(i) + 1, cps.begin() + static_cast<std::ptrdiff_t>(j))));
    i = j;
  }
  return r.text(std::move(out), s.is_markup());
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value filter_tojson(Renderer& r, const Value& input, const Args& args) {
  const auto a = bind_args("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions o;
  o.ensure_ascii = a[0] && a[0]->truthy();
  if (a[1] && !a[1]->is_none()) {
    o.indent = true;
    if (a[1]->is_string()) {
      o.indent_text = a[1]->str();
    } else {
      const std::int64_t n = int_arg("tojson", "indent", *a[1]);
      if (n > 1024) throw EvalError("tojson: indent is larger than 1024");
      o.indent_text.assign(static_cast<std::size_t>(std::max<std::int64_t>(0, n)), ' ');
    }
    o.item_separator.assign(1, ',');
  }
  if (a[2] && !a[2]->is_none()) {
    const Value& sep = *a[2];
    if (!sep.is_list() || sep.items().size() != 2 || !sep.items()[0].is_string() || !sep.items()[1].is_string()) {
      throw EvalError("tojson: separators must be a pair of strings");
    }
    o.item_separator = sep.items()[0].str();
    o.key_separator = sep.items()[1].str();
  }
  o.sort_keys = a[3] && a[3]->truthy();
  return r.text(json_dumps(input, o));
}

Value filter_trim(Renderer& r, const Value& input, const Args& args) {
  const auto a = bind_args("trim", args, {"chars"});
  std::optional<std::string> chars;
  if (a[0] && !a[0]->is_none()) {
    if (!a[0]->is_string()) throw EvalError("trim: chars must be a string or none");
    chars = a[0]->str();
  }
  const Value s = soft_str(input);
  return r.text(py_strip(s.str(), chars, true, true), s.is_markup());
}

}  // namespace hydragen::chat
