// The values a chat template computes with, modelled on the Python objects jinja2 hands
// around: None, bool, int, float, str (optionally Markup), list / tuple / range / dict views,
// dict (insertion-ordered), jinja2's Undefined, namespace, one-shot iterators (what filters
// such as selectattr return), callables and the `loop` object. Copies are cheap: containers are
// shared, and immutable except namespaces, iterators and loops.
// Two rules keep every value a finite tree of bounded depth (no reference cycles, no recursion
// that could exhaust the stack): containers nest at most kMaxNesting deep, and a namespace or
// loop object cannot be put inside a list, dict, iterator or namespace (jinja2 would allow it;
// real templates never do, and here it is an error).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hydragen::chat {

enum class ValueKind : std::uint8_t {
  Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Iterator, Callable, Loop
};

// Python's list, tuple, range and the dict views print and index differently.
enum class ListKind : std::uint8_t { List, Tuple, Range, DictKeys, DictValues, DictItems };

struct ListData;
class Dict;
struct NamespaceData;
struct IteratorData;
struct Callable;
struct LoopData;

class Value {
 public:
  Value() = default;  // undefined, without a hint
  static Value undefined(std::string hint);
  static Value none();
  Value(bool b);
  Value(std::int64_t i);
  Value(int i) : Value(static_cast<std::int64_t>(i)) {}
  Value(double f);
  Value(std::string s, bool markup = false);
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(std::vector<Value> items, ListKind kind = ListKind::List);
  static Value range(std::int64_t start, std::int64_t stop, std::int64_t step);
  static Value dict(Dict d);
  static Value ns(Dict attrs);
  static Value iterator(std::vector<Value> items, std::string type_name);
  static Value callable(std::shared_ptr<Callable> c);
  static Value loop(std::shared_ptr<LoopData> l);

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::Undefined; }
  bool is_none() const { return kind_ == ValueKind::None; }
  bool is_bool() const { return kind_ == ValueKind::Bool; }
  bool is_int() const { return kind_ == ValueKind::Int; }
  bool is_float() const { return kind_ == ValueKind::Float; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }  // Python's bool is an int
  bool is_integer() const { return is_bool() || is_int(); }
  bool is_string() const { return kind_ == ValueKind::String; }
  bool is_list() const { return kind_ == ValueKind::List; }
  bool is_dict() const { return kind_ == ValueKind::Dict; }
  bool is_namespace() const { return kind_ == ValueKind::Namespace; }
  bool is_iterator() const { return kind_ == ValueKind::Iterator; }
  bool is_callable() const { return kind_ == ValueKind::Callable; }
  bool is_loop() const { return kind_ == ValueKind::Loop; }
  bool is_markup() const { return kind_ == ValueKind::String && markup_; }

  bool as_bool() const { return b_; }
  std::int64_t as_int() const { return is_bool() ? static_cast<std::int64_t>(b_) : i_; }  // is_integer()
  double as_double() const;                                                             // is_number()
  const std::string& str() const;                  // is_string()
  const std::string& undefined_hint() const;       // is_undefined(); may be empty
  const ListData& list() const;
  const std::vector<Value>& items() const;          // is_list()
  const Dict& dict() const;
  NamespaceData& ns() const;
  IteratorData& iterator() const;
  const Callable& callable() const;
  LoopData& loop() const;

  // Python's truth value (an iterator is always true, as a generator object is).
  bool truthy() const;
  // Python's type name, as its error messages say it ('dict', 'NoneType', ...).
  std::string type_name() const;

 private:
  ValueKind kind_ = ValueKind::Undefined;
  bool markup_ = false;
  union {
    bool b_;
    std::int64_t i_ = 0;
    double f_;
  };
  std::shared_ptr<void> obj_;  // the string, hint, container or object of kind_
};

inline constexpr int kMaxNesting = 512;

// How deep `v` nests containers (0 for a scalar). Throws EvalError for a namespace or loop,
// which no container may hold.
int element_depth(const Value& v);

struct ListData {
  ListKind kind = ListKind::List;
  std::vector<Value> items;
  std::int64_t start = 0, stop = 0, step = 1;  // ListKind::Range
  int depth = 1;
};

// Python's dict: insertion-ordered, with Python's key equality (1, 1.0 and True are one key).
// Keys must be hashable (None, bool, numbers, str, tuples of those); Dict::key_of says.
class Dict {
 public:
  std::size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  const Value* find(const Value& key) const;  // null when absent or unhashable
  void set(Value key, Value value);           // throws EvalError for an unhashable key
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);

  // The canonical form of a hashable key (equal for keys Python treats as equal), or "" for an
  // unhashable one.
  static std::string key_of(const Value& key);

  int depth() const { return depth_; }

 private:
  std::vector<std::pair<Value, Value>> entries_;
  std::unordered_map<std::string, std::size_t> index_;
  int depth_ = 1;
};

struct NamespaceData {
  Dict attrs;
};

// A one-shot iterator: iterating takes the items not taken yet.
struct IteratorData {
  std::vector<Value> items;
  std::size_t next = 0;
  std::string type_name;  // "generator", "list_reverseiterator", ...
  int depth = 1;
};

// An error while computing a value; the renderer adds the position of the expression.
class EvalError : public std::exception {
 public:
  explicit EvalError(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Python's ==, with jinja2's rule that undefined equals only undefined.
bool py_equal(const Value& a, const Value& b);

}  // namespace hydragen::chat
