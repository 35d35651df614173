// Filters on sequences and mappings: join, map, select, selectattr, sort, unique, first, ...
// Those that are generators in jinja2 return one-shot iterators here too.
#include "chat/filter_impl.h"
#include "chat/merge_sort.h"
#include "chat/operators.h"
#include "chat/python_text.h"
#include "chat/renderer.h"
#include "chat/unicode.h"

namespace hydragen::chat {

namespace {

Value generator(std::vector<Value> items) { return Value::iterator(std::move(items), "generator"); }

Value tuple(Value a, Value b) { return Value::list({std::move(a), std::move(b)}, ListKind::Tuple); }

std::int64_t int_arg(const std::string& filter, const char* name, const Value& v) {
  if (!v.is_integer()) throw EvalError(filter + ": " + name + " must be an integer, got " + v.type_name());
  return v.as_int();
}

Value ignore_case(const Value& v) { return v.is_string() ? Value(py_lower(v.str()), v.is_markup()) : v; }

// A key for sort, unique, min and max: the attribute (or the item), lowered unless case_sensitive.
Value sort_key(const Value& item, const std::optional<Value>& attribute, bool case_sensitive) {
  const Value v = attribute && !attribute->is_none() ? attr_path(item, *attribute) : item;
  return case_sensitive ? v : ignore_case(v);
}

// The positional arguments after the first `skip`.
Args tail(const Args& args, std::size_t skip) {
  Args rest;
  rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(skip, args.positional.size())),
                         args.positional.end());
  rest.keyword = args.keyword;
  return rest;
}

// select / reject / selectattr / rejectattr.
Value select_or_reject(Renderer& r, const Value& input, const Args& args, bool reject, bool by_attr) {
  if (!input.truthy()) return generator({});
  std::optional<Value> attribute;
  std::size_t off = 0;
  if (by_attr) {
    if (args.positional.empty()) throw EvalError("missing the attribute name");
    attribute = args.positional[0];
    off = 1;
  }
  std::optional<std::string> test;
  if (args.positional.size() > off) test = py_str(args.positional[off]);
  const Args test_args = tail(args, off + 1);
  std::vector<Value> kept;
  for (Value& item : iterate(input)) {
    r.step();
    const Value v = attribute ? attr_path(item, *attribute) : item;
    const bool ok = test ? r.apply_test(*test, v, test_args) : v.truthy();
    if (ok != reject) kept.push_back(std::move(item));
  }
  return generator(std::move(kept));
}

std::vector<Value> reversed(const Value& v) {
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return items;
}

}  // namespace

Value attr_path(const Value& item, const Value& attribute) {
  if (!attribute.is_string()) return get_item(item, attribute);
  Value v = item;
  const std::string& path = attribute.str();
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos && part.size() < 19;
    v = get_item(v, digits ? Value(static_cast<std::int64_t>(std::stoll(part))) : Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value filter_attr(Renderer&, const Value& input, const Args& args) {
  const auto a = bind_args("attr", args, {"name"});
  if (!a[0]) throw EvalError("attr() needs the attribute name");
  const std::string name = py_str(*a[0]);
  if (has_method(input, name) || input.is_namespace() || input.is_loop()) return get_attr(input, name);
  require_defined(input);
  return Value::undefined("'" + input.type_name() + " object' has no attribute '" + name + "'");
}

Value filter_batch(Renderer& r, const Value& input, const Args& args) {
  const auto a = bind_args("batch", args, {"linecount", "fill_with"});
  if (!a[0]) throw EvalError("batch() needs the line count");
  const std::int64_t n = int_arg("batch", "linecount", *a[0]);
  std::vector<Value> batches, current;
  for (Value& item : iterate(input)) {
    if (static_cast<std::int64_t>(current.size()) == n) {
      batches.push_back(Value::list(std::move(current)));
      current.clear();
    }
    current.push_back(std::move(item));
  }
  if (!current.empty()) {
    if (a[1] && !a[1]->is_none()) {
      if (n > static_cast<std::int64_t>(r.limits().max_items)) throw EvalError("batch: the line count passes the item limit");
      while (static_cast<std::int64_t>(current.size()) < n) current.push_back(*a[1]);
    }
    batches.push_back(Value::list(std::move(current)));
  }
  return generator(std::move(batches));
}

Value filter_default(Renderer&, const Value& input, const Args& args) {
  const auto a = bind_args("default", args, {"default_value", "boolean"});
  const bool boolean = a[1] && a[1]->truthy();
  if (input.is_undefined() || (boolean && !input.truthy())) return arg_or(a[0], Value(""));
  return input;
}

Value filter_dictsort(Renderer&, const Value& input, const Args& args) {
  const auto a = bind_args("dictsort", args, {"case_sensitive", "by", "reverse"});
  require_defined(input);
  if (!input.is_dict()) throw EvalError("dictsort: expected a mapping, got " + input.type_name());
  const bool case_sensitive = a[0] && a[0]->truthy();
  const std::string by = a[1] ? py_str(*a[1]) : "key";
  if (by != "key" && by != "value") throw EvalError("dictsort: you can only sort by either \"key\" or \"value\"");
  const bool reverse = a[2] && a[2]->truthy();
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, v] : input.dict().entries()) {
    const Value& part = by == "key" ? k : v;
    keyed.emplace_back(case_sensitive ? part : ignore_case(part), tuple(k, v));
  }
  merge_sort(keyed, [reverse](const auto& x, const auto& y) { return reverse ? py_less(y.first, x.first) : py_less(x.first, y.first); });
  std::vector<Value> items;
  for (auto& [key, item] : keyed) items.push_back(std::move(item));
  return Value::list(std::move(items));
}

Value filter_first(Renderer&, const Value& input, const Args& args) {
  bind_args("first", args, {});
  if (input.is_iterator()) {
    IteratorData& it = input.iterator();
    if (it.next < it.items.size()) return it.items[it.next++];
  } else {
    const std::vector<Value> items = iterate(input);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value filter_items(Renderer&, const Value& input, const Args& args) {
  bind_args("items", args, {});
  if (input.is_undefined()) return generator({});
  if (!input.is_dict()) throw EvalError("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [k, v] : input.dict().entries()) pairs.push_back(tuple(k, v));
  return Value::iterator(std::move(pairs), "dict_itemiterator");
}

Value filter_join(Renderer& r, const Value& input, const Args& args) {
  const auto a = bind_args("join", args, {"d", "attribute"});
  const std::string sep = a[0] ? py_str(*a[0]) : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(input)) {
    if (!first) out += sep;
    first = false;
    out += py_str(a[1] && !a[1]->is_none() ? attr_path(item, *a[1]) : item);
    if (out.size() > r.limits().max_output_bytes) r.text(std::move(out));  // throws
  }
  return Value(std::move(out));
}

Value filter_last(Renderer&, const Value& input, const Args& args) {
  bind_args("last", args, {});
  if (input.is_iterator()) throw EvalError("'" + input.type_name() + "' object is not reversible");
  const std::vector<Value> items = iterate(input);
  if (!items.empty()) return items.back();
  return Value::undefined("No last item, sequence was empty.");
}

Value filter_length(Renderer&, const Value& input, const Args& args) {
  bind_args("length", args, {});
  return Value(py_len(input));
}

Value filter_list(Renderer&, const Value& input, const Args& args) {
  bind_args("list", args, {});
  return Value::list(iterate(input));
}

Value filter_map(Renderer& r, const Value& input, const Args& args) {
  if (!input.truthy()) return generator({});
  std::vector<Value> out;
  const auto attribute = std::find_if(args.keyword.begin(), args.keyword.end(), [](const auto& kv) { return kv.first == "attribute"; });
  if (args.positional.empty() && attribute != args.keyword.end()) {
    Value fallback = Value::none();
    for (const auto& [k, v] : args.keyword) {
      if (k == "default") {
        fallback = v;
      } else if (k != "attribute") {
        throw EvalError("map: unexpected keyword argument '" + k + "'");
      }
    }
    for (const Value& item : iterate(input)) {
      r.step();
      Value v = attr_path(item, attribute->second);
      if (v.is_undefined() && !fallback.is_none()) v = fallback;
      out.push_back(std::move(v));
    }
    return generator(std::move(out));
  }
  if (args.positional.empty()) throw EvalError("map requires a filter argument");
  const std::string name = py_str(args.positional[0]);
  const Args rest = tail(args, 1);
  for (const Value& item : iterate(input)) out.push_back(r.apply_filter(name, item, rest));
  return generator(std::move(out));
}

Value min_or_max(Renderer&, const Value& input, const Args& args, bool max) {
  const auto a = bind_args(max ? "max" : "min", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = a[0] && a[0]->truthy();
  const std::vector<Value> items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  std::size_t best = 0;
  Value best_key = sort_key(items[0], a[1], case_sensitive);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(items[i], a[1], case_sensitive);
    if (max ? py_less(best_key, key) : py_less(key, best_key)) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value filter_max(Renderer& r, const Value& input, const Args& args) { return min_or_max(r, input, args, true); }
Value filter_min(Renderer& r, const Value& input, const Args& args) { return min_or_max(r, input, args, false); }
Value filter_reject(Renderer& r, const Value& input, const Args& args) { return select_or_reject(r, input, args, true, false); }
Value filter_rejectattr(Renderer& r, const Value& input, const Args& args) { return select_or_reject(r, input, args, true, true); }
Value filter_select(Renderer& r, const Value& input, const Args& args) { return select_or_reject(r, input, args, false, false); }
Value filter_selectattr(Renderer& r, const Value& input, const Args& args) { return select_or_reject(r, input, args, false, true); }

Value filter_reverse(Renderer&, const Value& input, const Args& args) {
  bind_args("reverse", args, {});
  if (input.is_string()) {
    std::vector<char32_t> cps = code_points(input.str());
    std::reverse(cps.begin(), cps.end());
    return Value(to_utf8(cps), input.is_markup());
  }
  if (input.is_iterator()) return Value::list(reversed(input));
  switch (input.kind()) {
    case ValueKind::List:
    case ValueKind::Dict:
    case ValueKind::Undefined: return Value::iterator(reversed(input), "reversed");
    default: throw EvalError("reverse: argument must be iterable");
  }
}

Value filter_slice(Renderer& r, const Value& input, const Args& args) {
  const auto a = bind_args("slice", args, {"slices", "fill_with"});
  if (!a[0]) throw EvalError("slice() needs the number of slices");
  const std::int64_t slices = int_arg("slice", "slices", *a[0]);
  if (slices <= 0) throw EvalError("slice: the number of slices must be positive");
  if (slices > static_cast<std::int64_t>(r.limits().max_items)) throw EvalError("slice: too many slices");
  const std::vector<Value> seq = iterate(input);
  const auto length = static_cast<std::int64_t>(seq.size());
  const std::int64_t per = length / slices, with_extra = length % slices;
  std::vector<Value> out;
  std::int64_t offset = 0;
  for (std::int64_t n = 0; n < slices; ++n) {
    const std::int64_t start = std::min(length, offset + n * per);
    if (n < with_extra) ++offset;
    const std::int64_t end = std::max(start, std::min(length, offset + (n + 1) * per));
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (a[1] && !a[1]->is_none() && n >= with_extra) part.push_back(*a[1]);
    out.push_back(Value::list(std::move(part)));
  }
  return generator(std::move(out));
}

Value filter_sort(Renderer&, const Value& input, const Args& args) {
  const auto a = bind_args("sort", args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = a[0] && a[0]->truthy();
  const bool case_sensitive = a[1] && a[1]->truthy();
  std::vector<Value> paths;  // "age,name": several keys
  if (a[2] && a[2]->is_string()) {
    const std::string& spec = a[2]->str();
    for (std::size_t start = 0;;) {
      const std::size_t comma = spec.find(',', start);
      paths.emplace_back(spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  } else {
    paths.push_back(a[2] ? *a[2] : Value::none());
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : iterate(input)) {
    std::vector<Value> key;
    for (const Value& p : paths) key.push_back(sort_key(item, p, case_sensitive));
    keyed.emplace_back(Value::list(std::move(key)), std::move(item));
  }
  merge_sort(keyed, [reverse](const auto& x, const auto& y) { return reverse ? py_less(y.first, x.first) : py_less(x.first, y.first); });
  std::vector<Value> items;
  for (auto& [key, item] : keyed) items.push_back(std::move(item));
  return Value::list(std::move(items));
}

Value filter_sum(Renderer& r, const Value& input, const Args& args) {
  const auto a = bind_args("sum", args, {"attribute", "start"});
  Value total = arg_or(a[1], Value(0));
  if (total.is_string()) throw EvalError("sum() can't sum strings [use ''.join(seq) instead]");
  for (const Value& item : iterate(input)) {
    total = binary_op(BinOp::Add, total, a[0] && !a[0]->is_none() ? attr_path(item, *a[0]) : item, r.limits());
  }
  return total;
}

Value filter_unique(Renderer&, const Value& input, const Args& args) {
  const auto a = bind_args("unique", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = a[0] && a[0]->truthy();
  Dict seen;
  std::vector<Value> out;
  for (Value& item : iterate(input)) {
    const Value key = sort_key(item, a[1], case_sensitive);
    if (seen.find(key) == nullptr) {
      seen.set(key, Value::none());
      out.push_back(std::move(item));
    }
  }
  return generator(std::move(out));
}

}  // namespace hydragen::chat
