// JSON <-> Value: the render context read from nlohmann JSON (key order kept for
// ordered_json), and json.dumps as transformers' tojson filter calls it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "chat/value.h"

namespace hydragen::chat {

// Throws EvalError naming the place ("messages[2].content") of invalid UTF-8, an integer
// beyond 64 bits, or nesting deeper than kMaxNesting.
Value value_from_json(const nlohmann::json& j);
Value value_from_json(const nlohmann::ordered_json& j);

// json.dumps(v, ensure_ascii=..., indent=..., separators=..., sort_keys=...).
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool indent = false;          // json.dumps's indent is not None
  std::string indent_text;      // one level of it
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// Throws EvalError for what json.dumps refuses (undefined, generators, namespaces, ...).
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace hydragen::chat
