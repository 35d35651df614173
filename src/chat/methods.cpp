// The methods templates call on values: str (strip, split, startswith, format, ...), dict (get,
// items, keys, values) and list (count, index). The sandbox's refusals included.
#include <algorithm>
#include <array>

#include "chat/builtins.h"
#include "chat/operators.h"
#include "chat/python_text.h"
#include "chat/renderer.h"
#include "chat/string_ops.h"
#include "chat/unicode.h"

namespace hydragen::chat {

namespace {

constexpr std::array<std::string_view, 47> kStrMethods = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
    "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
    "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
    "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip", "swapcase",
    "title", "translate", "upper", "zfill"};
constexpr std::array<std::string_view, 6> kDictMethods = {"copy", "fromkeys", "get", "items", "keys", "values"};
constexpr std::array<std::string_view, 5> kDictUnsafe = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::array<std::string_view, 3> kListMethods = {"copy", "count", "index"};
constexpr std::array<std::string_view, 8> kListUnsafe = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};

template <std::size_t N>
bool in(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool is_sequence(const Value& v) {
  return v.is_list() && (v.list().kind == ListKind::List || v.list().kind == ListKind::Tuple || v.list().kind == ListKind::Range);
}

std::string str_arg(const std::string& method, const Value& v) {
  if (!v.is_string()) throw EvalError(method + ": expected a str argument, got " + v.type_name());
  return v.str();
}

std::optional<std::string> chars_arg(const std::string& method, const std::optional<Value>& v) {
  if (!v || v->is_none()) return std::nullopt;
  return str_arg(method, *v);
}

std::optional<std::int64_t> index_arg(const std::string& method, const std::optional<Value>& v) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_integer()) throw EvalError(method + ": slice indices must be integers or None");
  return v->as_int();
}

std::int64_t width_arg(Renderer& r, const std::string& method, const std::optional<Value>& v) {
  if (!v) throw EvalError(method + "() needs the width");
  if (!v->is_integer()) throw EvalError(method + ": the width must be an integer");
  if (v->as_int() > static_cast<std::int64_t>(r.limits().max_output_bytes)) throw EvalError(method + ": the width passes the output limit");
  return v->as_int();
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
  const std::vector<char32_t> cps = code_points(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

bool is_decimal(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos; }

// A field index or key of decimal digits, as Python reads it (which refuses what overflows).
std::int64_t decimal_value(const std::string& digits) {
  if (digits.size() > 18) throw EvalError("format: too many decimal digits in format string");
  return std::stoll(digits);
}

// str.format with {}, {0}, {name}, .attr / [key] lookups and !r / !s; no format specs.
std::string str_format(const std::string& fmt, const Args& args, bool markup) {
  enum class Numbering { None, Automatic, Manual };
  std::string out;
  std::size_t auto_index = 0;
  Numbering used = Numbering::None;
  auto esc = [markup](std::string s) { return markup ? html_escape(s) : s; };
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else throw EvalError("format: single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const std::size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw EvalError("format: single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 0;
    if (const std::size_t colon = field.find(':'); colon != std::string::npos) {
      if (colon + 1 < field.size()) throw EvalError("format: format specifications are not supported");
      field.resize(colon);
    }
    if (const std::size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size() || (field[bang + 1] != 'r' && field[bang + 1] != 's')) throw EvalError("format: unknown conversion");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    const std::size_t head_end = std::min(field.find('.'), field.find('['));
    const std::string head = field.substr(0, head_end);
    Value v;
    if (head.empty() || is_decimal(head)) {
      const Numbering numbering = head.empty() ? Numbering::Automatic : Numbering::Manual;
      if (used != Numbering::None && used != numbering) {
        throw EvalError("format: cannot switch between automatic field numbering and manual field specification");
      }
      used = numbering;
      const std::size_t index = head.empty() ? auto_index++ : static_cast<std::size_t>(decimal_value(head));
      if (index >= args.positional.size()) throw EvalError("format: replacement index " + head + " out of range");
      v = args.positional[index];
    } else {
      auto it = std::find_if(args.keyword.begin(), args.keyword.end(), [&](const auto& kv) { return kv.first == head; });
      if (it == args.keyword.end()) throw EvalError("format: KeyError: '" + head + "'");
      v = it->second;
    }
    for (std::size_t p = head_end; p < field.size();) {
      if (field[p] == '.') {
        const std::size_t next = std::min(field.find('.', p + 1), field.find('[', p + 1));
        const std::string attr = field.substr(p + 1, next - p - 1);
        if (attr.empty()) throw EvalError("format: empty attribute in format string");
        v = get_attr(v, attr);
        p = next;
      } else {
        const std::size_t end = field.find(']', p);
        if (end == std::string::npos) throw EvalError("format: missing ']' in format string");
        const std::string key = field.substr(p + 1, end - p - 1);
        if (key.empty()) throw EvalError("format: empty attribute in format string");
        v = get_item(v, is_decimal(key) ? Value(decimal_value(key)) : Value(key));
        p = end + 1;
      }
    }
    out += conversion == 'r' ? esc(py_repr(v)) : v.is_markup() ? v.str() : esc(py_str(v));
  }
  return out;
}

Value str_method(Renderer& r, const Value& self, const std::string& name, const Args& args) {
  const std::string& s = self.str();
  const bool m = self.is_markup();
  const std::string fn = "str." + name;
  auto out = [&](std::string text) { return r.text(std::move(text), m); };
  auto list_of = [&](const std::vector<std::string>& parts, ListKind kind = ListKind::List) {
    std::vector<Value> items;
    for (const std::string& p : parts) items.emplace_back(p, m);
    return Value::list(std::move(items), kind);
  };
  if (name == "upper") return bind_args(fn, args, {}), out(py_upper(s));
  if (name == "lower") return bind_args(fn, args, {}), out(py_lower(s));
  if (name == "title") return bind_args(fn, args, {}), out(py_title(s));
  if (name == "capitalize") return bind_args(fn, args, {}), out(py_capitalize(s));
  if (name == "swapcase") return bind_args(fn, args, {}), out(py_swapcase(s));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const auto a = bind_args(fn, args, {"chars"});
    return out(py_strip(s, chars_arg(fn, a[0]), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const auto a = bind_args(fn, args, {"sep", "maxsplit"});
    const std::int64_t maxsplit = a[1] ? index_arg(fn, a[1]).value_or(-1) : -1;
    return list_of(py_split(s, chars_arg(fn, a[0]), maxsplit, name == "rsplit"));
  }
  if (name == "splitlines") {
    const auto a = bind_args(fn, args, {"keepends"});
    return list_of(py_splitlines(s, a[0] && a[0]->truthy()));
  }
  if (name == "startswith" || name == "endswith") {
    const auto a = bind_args(fn, args, {"prefix", "start", "end"});
    if (!a[0]) throw EvalError(fn + "() needs an argument");
    std::vector<std::string> affixes;
    if (a[0]->is_list() && a[0]->list().kind == ListKind::Tuple) {
      for (const Value& v : a[0]->items()) affixes.push_back(str_arg(fn, v));
    } else {
      affixes.push_back(str_arg(fn, *a[0]));
    }
    for (const std::string& affix : affixes) {
      if (py_affix(s, affix, index_arg(fn, a[1]), index_arg(fn, a[2]), name == "endswith")) return Value(true);
    }
    return Value(false);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const auto a = bind_args(fn, args, {"sub", "start", "end"});
    if (!a[0]) throw EvalError(fn + "() needs an argument");
    const std::string sub = str_arg(fn, *a[0]);
    if (name == "count") return Value(py_count(s, sub, index_arg(fn, a[1]), index_arg(fn, a[2])));
    const std::int64_t at = py_find(s, sub, index_arg(fn, a[1]), index_arg(fn, a[2]), name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) throw EvalError(fn + ": substring not found");
    return Value(at);
  }
  if (name == "replace") {
    const auto a = bind_args(fn, args, {"old", "new", "count"});
    if (!a[0] || !a[1]) throw EvalError(fn + "() needs the old and the new text");
    std::string old = str_arg(fn, *a[0]), repl = str_arg(fn, *a[1]);
    if (m && !a[0]->is_markup()) old = html_escape(old);
    if (m && !a[1]->is_markup()) repl = html_escape(repl);
    return out(py_replace(s, old, repl, index_arg(fn, a[2]).value_or(-1), r.limits().max_output_bytes));
  }
  if (name == "join") {
    const auto a = bind_args(fn, args, {"iterable"});
    if (!a[0]) throw EvalError(fn + "() needs an argument");
    std::string joined;
    std::size_t i = 0;
    for (const Value& item : iterate(*a[0])) {
      if (!item.is_string()) {
        throw EvalError("sequence item " + std::to_string(i) + ": expected str instance, " + item.type_name() + " found");
      }
      if (i++ > 0) joined += s;
      joined += m && !item.is_markup() ? html_escape(item.str()) : item.str();
      if (joined.size() > r.limits().max_output_bytes) r.text(std::move(joined));  // throws
    }
    return out(std::move(joined));
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    const auto a = bind_args(fn, args, {"width", "fillchar"});
    const std::int64_t width = width_arg(r, fn, a[0]);
    const std::string fill = a[1] ? str_arg(fn, *a[1]) : " ";
    if (code_point_count(fill) != 1) throw EvalError(fn + ": the fill character must be exactly one character long");
    return out(py_pad(s, width, fill, name == "center" ? '^' : name == "ljust" ? '<' : '>'));
  }
  if (name == "zfill") {
    const auto a = bind_args(fn, args, {"width"});
    return out(py_zfill(s, width_arg(r, fn, a[0])));
  }
  if (name == "partition" || name == "rpartition") {
    const auto a = bind_args(fn, args, {"sep"});
    if (!a[0]) throw EvalError(fn + "() needs an argument");
    const std::string sep = str_arg(fn, *a[0]);
    if (sep.empty()) throw EvalError(fn + ": empty separator");
    const std::size_t at = name == "partition" ? byte_find(s, sep) : byte_rfind(s, sep);
    if (at == std::string::npos) {
      return name == "partition" ? list_of({s, "", ""}, ListKind::Tuple) : list_of({"", "", s}, ListKind::Tuple);
    }
    return list_of({s.substr(0, at), sep, s.substr(at + sep.size())}, ListKind::Tuple);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const auto a = bind_args(fn, args, {"affix"});
    if (!a[0]) throw EvalError(fn + "() needs an argument");
    const std::string affix = str_arg(fn, *a[0]);
    const bool prefix = name == "removeprefix";
    if (s.size() >= affix.size() && (prefix ? s.compare(0, affix.size(), affix) == 0
                                            : s.compare(s.size() - affix.size(), affix.size(), affix) == 0)) {
      return out(prefix ? s.substr(affix.size()) : s.substr(0, s.size() - affix.size()));
    }
    return self;
  }
  if (name == "format") return out(str_format(s, args, m));
  if (name == "isspace") return bind_args(fn, args, {}), Value(all_chars(s, py_isspace));
  if (name == "isalpha") return bind_args(fn, args, {}), Value(all_chars(s, py_isalpha));
  if (name == "isdecimal") return bind_args(fn, args, {}), Value(all_chars(s, py_isdecimal));
  if (name == "isdigit") return bind_args(fn, args, {}), Value(all_chars(s, py_isdigit));
  if (name == "isnumeric") return bind_args(fn, args, {}), Value(all_chars(s, py_isnumeric));
  if (name == "isalnum") {
    bind_args(fn, args, {});
    return Value(all_chars(s, [](char32_t c) { return py_isalpha(c) || py_isdecimal(c) || py_isdigit(c) || py_isnumeric(c); }));
  }
  if (name == "isascii") {
    bind_args(fn, args, {});
    return Value(std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  }
  if (name == "isprintable") {
    bind_args(fn, args, {});
    const std::vector<char32_t> cps = code_points(s);
    return Value(std::all_of(cps.begin(), cps.end(), py_isprintable));
  }
  if (name == "islower" || name == "isupper") return bind_args(fn, args, {}), Value(name == "islower" ? py_islower(s) : py_isupper(s));
  throw EvalError(fn + "() is not supported");
}

Value dict_method(const Value& self, const std::string& name, const Args& args) {
  const std::string fn = "dict." + name;
  const Dict& d = self.dict();
  if (name == "get") {
    const auto a = bind_args(fn, args, {"key", "default"});
    if (!a[0]) throw EvalError(fn + "() needs a key");
    if (Dict::key_of(*a[0]).empty()) throw EvalError("unhashable type: '" + a[0]->type_name() + "'");
    const Value* v = d.find(*a[0]);
    return v ? *v : arg_or(a[1], Value::none());
  }
  bind_args(fn, args, {});
  std::vector<Value> items;
  if (name == "copy") return self;  // dicts are never changed in place
  for (const auto& [k, v] : d.entries()) {
    if (name == "keys") items.push_back(k);
    else if (name == "values") items.push_back(v);
    else if (name == "items") items.push_back(Value::list({k, v}, ListKind::Tuple));
    else throw EvalError(fn + "() is not supported");
  }
  const ListKind kind = name == "keys" ? ListKind::DictKeys : name == "values" ? ListKind::DictValues : ListKind::DictItems;
  return Value::list(std::move(items), kind);
}

Value list_method(const Value& self, const std::string& name, const Args& args) {
  const std::string fn = self.type_name() + "." + name;
  const std::vector<Value>& items = self.items();
  if (name == "copy") return bind_args(fn, args, {}), Value::list(items, ListKind::List);
  const auto a = bind_args(fn, args, {"value", "start", "stop"});
  if (!a[0]) throw EvalError(fn + "() needs an argument");
  if (name == "count") {
    if (a[1]) throw EvalError(fn + "() takes exactly one argument");
    return Value(static_cast<std::int64_t>(std::count_if(items.begin(), items.end(), [&](const Value& v) { return py_equal(v, *a[0]); })));
  }
  const auto n = static_cast<std::int64_t>(items.size());
  auto fix = [n](const std::optional<Value>& v, std::int64_t fallback) {
    if (!v) return fallback;
    if (!v->is_integer()) throw EvalError("slice indices must be integers");
    std::int64_t i = v->as_int();
    if (i < 0) i = std::max<std::int64_t>(0, i + n);
    return std::min(i, n);
  };
  for (std::int64_t i = fix(a[1], 0), end = fix(a[2], n); i < end; ++i) {
    if (py_equal(items[static_cast<std::size_t>(i)], *a[0])) return Value(i);
  }
  throw EvalError(fn + "(x): x not in " + self.type_name());
}

}  // namespace

bool has_method(const Value& self, std::string_view name) {
  switch (self.kind()) {
    case ValueKind::String: return in(kStrMethods, name);
    case ValueKind::Dict: return in(kDictMethods, name);
    case ValueKind::List:
      if (self.list().kind == ListKind::List) return in(kListMethods, name);
      return is_sequence(self) && (name == "count" || name == "index");
    default: return false;
  }
}

bool is_unsafe_method(const Value& self, std::string_view name) {
  if (self.is_dict()) return in(kDictUnsafe, name);
  return self.is_list() && self.list().kind == ListKind::List && in(kListUnsafe, name);
}

Value call_method(Renderer& r, const Value& self, const std::string& name, const Args& args) {
  switch (self.kind()) {
    case ValueKind::String: return str_method(r, self, name, args);
    case ValueKind::Dict: return dict_method(self, name, args);
    case ValueKind::List: return list_method(self, name, args);
    case ValueKind::Loop: {
      LoopData& loop = self.loop();
      if (name == "cycle") {
        if (args.positional.empty()) throw EvalError("no items for cycling given");
        return args.positional[loop.index0 % args.positional.size()];
      }
      const Value current = args.positional.size() == 1 ? args.positional[0] : Value::list(args.positional, ListKind::Tuple);
      if (loop.has_changed_value && py_equal(loop.changed_value, current)) return Value(false);
      loop.has_changed_value = true;
      loop.changed_value = current;
      return Value(true);
    }
    default: throw EvalError("'" + self.type_name() + "' object has no method '" + name + "'");
  }
}

}  // namespace hydragen::chat
