#include "chat/json_values.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/merge_sort.h"
#include "chat/operators.h"
#include "chat/python_text.h"
#include "tokenizer/utf8.h"

namespace hydragen::chat {

namespace {

template <class Json>
Value convert(const Json& j, const std::string& where, int depth) {
  if (depth > kMaxNesting) throw EvalError(where + ": nested deeper than " + std::to_string(kMaxNesting) + " levels");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        throw EvalError(where + ": the integer " + std::to_string(u) + " does not fit 64 bits");
      }
      return Value(static_cast<std::int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: {
      const auto& s = j.template get_ref<const std::string&>();
      if (tok::utf8_invalid_at(s) != std::string::npos) throw EvalError(where + ": the string is not valid UTF-8");
      return Value(s);
    }
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      std::size_t i = 0;
      for (const auto& item : j) items.push_back(convert(item, where + "[" + std::to_string(i++) + "]", depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (tok::utf8_invalid_at(it.key()) != std::string::npos) throw EvalError(where + ": a key is not valid UTF-8");
        d.set(it.key(), convert(it.value(), where.empty() ? it.key() : where + "." + it.key(), depth + 1));
      }
      return Value::dict(std::move(d));
    }
    default: throw EvalError(where + ": binary JSON values are not supported");
  }
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b >= 0x80) {
      const std::size_t start = i;
      const char32_t cp = tok::utf8_next(s, i);
      if (!ensure_ascii) {
        out.append(s, start, i - start);
        continue;
      }
      char buf[16];
      if (cp >= 0x10000) {
        const char32_t v = cp - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
      continue;
    }
    ++i;
    switch (b) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (b < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", b);
          out += buf;
        } else {
          out += static_cast<char>(b);
        }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

[[noreturn]] void not_serializable(const Value& v) {
  throw EvalError("Object of type " + v.type_name() + " is not JSON serializable");
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& o) : o_(o) {}

  void value(const Value& v, int level) {
    switch (v.kind()) {
      case ValueKind::None: out_ += "null"; return;
      case ValueKind::Bool: out_ += v.as_bool() ? "true" : "false"; return;
      case ValueKind::Int: out_ += std::to_string(v.as_int()); return;
      case ValueKind::Float: out_ += json_float(v.as_double()); return;
      case ValueKind::String: append_json_string(out_, v.str(), o_.ensure_ascii); return;
      case ValueKind::List:
        if (v.list().kind != ListKind::List && v.list().kind != ListKind::Tuple) not_serializable(v);
        sequence(v.items(), level);
        return;
      case ValueKind::Dict: mapping(v.dict(), level); return;
      default: not_serializable(v);
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void newline(int level) {
    out_ += '\n';
    for (int i = 0; i < level; ++i) out_ += o_.indent_text;
  }

  void sequence(const std::vector<Value>& items, int level) {
    if (items.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_ += o_.item_separator;
      if (o_.indent) newline(level + 1);
      value(items[i], level + 1);
    }
    if (o_.indent) newline(level);
    out_ += ']';
  }

  // json.dumps turns None, bool, int and float keys into strings and refuses other keys.
  std::string key_text(const Value& k) {
    switch (k.kind()) {
      case ValueKind::String: return k.str();
      case ValueKind::None: return "null";
      case ValueKind::Bool: return k.as_bool() ? "true" : "false";
      case ValueKind::Int: return std::to_string(k.as_int());
      case ValueKind::Float: return json_float(k.as_double());
      default: throw EvalError("keys must be str, int, float, bool or None, not " + k.type_name());
    }
  }

  void mapping(const Dict& d, int level) {
    if (d.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& e : d.entries()) entries.push_back(&e);
    if (o_.sort_keys) merge_sort(entries, [](const auto* a, const auto* b) { return py_less(a->first, b->first); });
    out_ += '{';
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out_ += o_.item_separator;
      if (o_.indent) newline(level + 1);
      append_json_string(out_, key_text(entries[i]->first), o_.ensure_ascii);
      out_ += o_.key_separator;
      value(entries[i]->second, level + 1);
    }
    if (o_.indent) newline(level);
    out_ += '}';
  }

  const JsonDumpOptions& o_;
  std::string out_;
};

}  // namespace

Value value_from_json(const nlohmann::json& j) { return convert(j, "", 0); }
Value value_from_json(const nlohmann::ordered_json& j) { return convert(j, "", 0); }

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  Dumper d(options);
  d.value(v, 0);
  return d.take();
}

}  // namespace hydragen::chat
