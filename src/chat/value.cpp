#include "chat/value.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace hydragen::chat {

namespace {

const std::string kEmpty;

template <class T>
T* as(const std::shared_ptr<void>& p) {
  return static_cast<T*>(p.get());
}

// Python's int == float: exact, not through a conversion that rounds.
bool int_equals_double(std::int64_t i, double d) {
  if (!std::isfinite(d) || d != std::floor(d)) return false;
  if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) return false;
  return static_cast<std::int64_t>(d) == i;
}

bool sequences_equal(const std::vector<Value>& a, const std::vector<Value>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!py_equal(a[i], b[i])) return false;
  }
  return true;
}

// dict_keys and dict_items compare as sets.
bool same_elements(const std::vector<Value>& a, const std::vector<Value>& b) {
  if (a.size() != b.size()) return false;
  for (const Value& x : a) {
    bool found = false;
    for (const Value& y : b) found = found || py_equal(x, y);
    if (!found) return false;
  }
  return true;
}

int max_depth(const std::vector<Value>& items) {
  int d = 0;
  for (const Value& v : items) d = std::max(d, element_depth(v));
  if (d + 1 > kMaxNesting) throw EvalError("values nest deeper than " + std::to_string(kMaxNesting) + " levels");
  return d + 1;
}

}  // namespace

int element_depth(const Value& v) {
  switch (v.kind()) {
    case ValueKind::List: return v.list().depth;
    case ValueKind::Dict: return v.dict().depth();
    case ValueKind::Iterator: return v.iterator().depth;
    case ValueKind::Namespace: throw EvalError("a namespace cannot be put inside a list, dict or namespace");
    case ValueKind::Loop: throw EvalError("the loop object cannot be put inside a list, dict or namespace");
    default: return 0;
  }
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.obj_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = ValueKind::None;
  return v;
}

Value::Value(bool b) : kind_(ValueKind::Bool) { b_ = b; }
Value::Value(std::int64_t i) : kind_(ValueKind::Int) { i_ = i; }
Value::Value(double f) : kind_(ValueKind::Float) { f_ = f; }
Value::Value(std::string s, bool markup) : kind_(ValueKind::String), markup_(markup) {
  obj_ = std::make_shared<std::string>(std::move(s));
}

Value Value::list(std::vector<Value> items, ListKind kind) {
  Value v;
  v.kind_ = ValueKind::List;
  auto data = std::make_shared<ListData>();
  data->kind = kind;
  data->depth = max_depth(items);
  data->items = std::move(items);
  v.obj_ = std::move(data);
  return v;
}

Value Value::range(std::int64_t start, std::int64_t stop, std::int64_t step) {
  std::vector<Value> items;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) items.emplace_back(i);
  Value v = list(std::move(items), ListKind::Range);
  ListData& data = *as<ListData>(v.obj_);
  data.start = start;
  data.stop = stop;
  data.step = step;
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = ValueKind::Dict;
  v.obj_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::ns(Dict attrs) {
  Value v;
  v.kind_ = ValueKind::Namespace;
  v.obj_ = std::make_shared<NamespaceData>(NamespaceData{std::move(attrs)});
  return v;
}

Value Value::iterator(std::vector<Value> items, std::string type_name) {
  Value v;
  v.kind_ = ValueKind::Iterator;
  const int depth = max_depth(items);
  v.obj_ = std::make_shared<IteratorData>(IteratorData{std::move(items), 0, std::move(type_name), depth});
  return v;
}

Value Value::callable(std::shared_ptr<Callable> c) {
  Value v;
  v.kind_ = ValueKind::Callable;
  v.obj_ = std::move(c);
  return v;
}

Value Value::loop(std::shared_ptr<LoopData> l) {
  Value v;
  v.kind_ = ValueKind::Loop;
  v.obj_ = std::move(l);
  return v;
}

double Value::as_double() const {
  if (kind_ == ValueKind::Float) return f_;
  return static_cast<double>(as_int());
}

const std::string& Value::str() const { return *as<std::string>(obj_); }
const std::string& Value::undefined_hint() const { return obj_ ? *as<std::string>(obj_) : kEmpty; }
const ListData& Value::list() const { return *as<ListData>(obj_); }
const std::vector<Value>& Value::items() const { return as<ListData>(obj_)->items; }
const Dict& Value::dict() const { return *as<Dict>(obj_); }
NamespaceData& Value::ns() const { return *as<NamespaceData>(obj_); }
IteratorData& Value::iterator() const { return *as<IteratorData>(obj_); }
const Callable& Value::callable() const { return *as<Callable>(obj_); }
LoopData& Value::loop() const { return *as<LoopData>(obj_); }

bool Value::truthy() const {
  switch (kind_) {
    case ValueKind::Undefined:
    case ValueKind::None: return false;
    case ValueKind::Bool: return b_;
    case ValueKind::Int: return i_ != 0;
    case ValueKind::Float: return f_ != 0.0;
    case ValueKind::String: return !str().empty();
    case ValueKind::List: return !items().empty();
    case ValueKind::Dict: return !dict().empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case ValueKind::Undefined: return "Undefined";
    case ValueKind::None: return "NoneType";
    case ValueKind::Bool: return "bool";
    case ValueKind::Int: return "int";
    case ValueKind::Float: return "float";
    case ValueKind::String: return markup_ ? "Markup" : "str";
    case ValueKind::List:
      switch (list().kind) {
        case ListKind::List: return "list";
        case ListKind::Tuple: return "tuple";
        case ListKind::Range: return "range";
        case ListKind::DictKeys: return "dict_keys";
        case ListKind::DictValues: return "dict_values";
        case ListKind::DictItems: return "dict_items";
      }
      return "list";
    case ValueKind::Dict: return "dict";
    case ValueKind::Namespace: return "Namespace";
    case ValueKind::Iterator: return iterator().type_name;
    case ValueKind::Callable: return "function";
    case ValueKind::Loop: return "LoopContext";
  }
  return "object";
}

std::string Dict::key_of(const Value& key) {
  switch (key.kind()) {
    case ValueKind::String: return "s" + key.str();
    case ValueKind::Bool:
    case ValueKind::Int: return "i" + std::to_string(key.as_int());
    case ValueKind::Float: {
      const double d = key.as_double();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
        return "i" + std::to_string(static_cast<std::int64_t>(d));
      }
      std::uint64_t bits;
      std::memcpy(&bits, &d, sizeof bits);
      return "f" + std::to_string(bits);
    }
    case ValueKind::None: return "n";
    case ValueKind::Undefined: return "u";
    case ValueKind::List: {
      if (key.list().kind != ListKind::Tuple) return "";
      std::string k = "t(";
      for (const Value& item : key.items()) {
        const std::string part = key_of(item);
        if (part.empty()) return "";
        k += std::to_string(part.size()) + ":" + part;
      }
      return k + ")";
    }
    default: return "";
  }
}

const Value* Dict::find(const Value& key) const {
  const std::string k = key_of(key);
  if (k.empty()) return nullptr;
  auto it = index_.find(k);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

const Value* Dict::find(std::string_view key) const {
  std::string k = "s";
  k.append(key);
  auto it = index_.find(k);
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Dict::set(Value key, Value value) {
  std::string k = key_of(key);
  if (k.empty()) throw EvalError("unhashable type: '" + key.type_name() + "'");
  const int d = std::max(element_depth(key), element_depth(value)) + 1;
  if (d > kMaxNesting) throw EvalError("values nest deeper than " + std::to_string(kMaxNesting) + " levels");
  depth_ = std::max(depth_, d);
  auto [it, inserted] = index_.emplace(std::move(k), entries_.size());
  if (inserted) {
    entries_.emplace_back(std::move(key), std::move(value));
  } else {
    entries_[it->second].second = std::move(value);
  }
}

void Dict::set(std::string key, Value value) { set(Value(std::move(key)), std::move(value)); }

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() && b.is_float()) return a.as_double() == b.as_double();
    if (a.is_float()) return int_equals_double(b.as_int(), a.as_double());
    if (b.is_float()) return int_equals_double(a.as_int(), b.as_double());
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::Undefined:
    case ValueKind::None: return true;
    case ValueKind::String: return a.str() == b.str();
    case ValueKind::List: {
      const ListKind ka = a.list().kind, kb = b.list().kind;
      if (ka != kb) return false;
      if (ka == ListKind::DictKeys || ka == ListKind::DictItems) return same_elements(a.items(), b.items());
      if (ka == ListKind::DictValues) return &a.list() == &b.list();
      return sequences_equal(a.items(), b.items());
    }
    case ValueKind::Dict: {
      const Dict& da = a.dict();
      const Dict& db = b.dict();
      if (da.size() != db.size()) return false;
      for (const auto& [k, v] : da.entries()) {
        const Value* other = db.find(k);
        if (other == nullptr || !py_equal(v, *other)) return false;
      }
      return true;
    }
    case ValueKind::Namespace: return &a.ns() == &b.ns();
    case ValueKind::Iterator: return &a.iterator() == &b.iterator();
    case ValueKind::Callable: return &a.callable() == &b.callable();
    case ValueKind::Loop: return &a.loop() == &b.loop();
    default: return false;
  }
}

}  // namespace hydragen::chat
