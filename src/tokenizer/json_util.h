// Reading tokenizer.json fields with errors that name the field ("model.merges[3]") instead of
// nlohmann's generic type errors.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/json_reader.h"
#include "hydragen/error.h"

namespace hydragen::tok {

using Json = nlohmann::json;

// The largest tokenizer.json read (real ones are 2-35 MB) and the other files beside it.
inline constexpr std::uint64_t kMaxTokenizerJsonBytes = std::uint64_t{512} << 20;
inline constexpr std::uint64_t kMaxTokenizerConfigBytes = std::uint64_t{64} << 20;

inline const Json& require_field(const Json& obj, const char* key, const std::string& where) {
  HG_CHECK(obj.is_object(), where, " must be a JSON object, got ", obj.type_name());
  auto it = obj.find(key);
  HG_CHECK(it != obj.end(), where, ".", key, " is missing");
  return *it;
}

inline std::string require_string(const Json& obj, const char* key, const std::string& where) {
  const Json& v = require_field(obj, key, where);
  HG_CHECK(v.is_string(), where, ".", key, " must be a string, got ", v.type_name());
  return v.get<std::string>();
}

// The field when present and not null, else fallback.
template <class T>
T optional_field(const Json& obj, const char* key, const T& fallback, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const Json::exception&) {
    fail(where, ".", key, " has the wrong type (", it->type_name(), ")");
  }
}

// A special token as tokenizer_config.json writes it: "<s>" or {"content": "<s>", ...}; "" when
// absent or null. `where` names the file in errors.
inline std::string token_text(const Json& config, const char* key, const std::string& where) {
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return "";
  const Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  HG_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), where, ": ", key,
           " must be a string or {\"content\": ...}, got ", json_excerpt(v));
  return v["content"].get<std::string>();
}

// The "type" tag of a normalizer / pre-tokenizer / decoder / model object.
inline std::string type_tag(const Json& obj, const std::string& where) {
  return require_string(obj, "type", where);
}

// A pattern object {"String": s} or {"Regex": r}.
struct Pattern {
  std::string text;
  bool is_regex = false;
};

inline Pattern read_pattern(const Json& obj, const std::string& where) {
  const Json& p = require_field(obj, "pattern", where);
  if (p.is_object() && p.contains("String") && p["String"].is_string()) {
    return {p["String"].get<std::string>(), false};
  }
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
    return {p["Regex"].get<std::string>(), true};
  }
  fail(where, ".pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

// The steps of a "Sequence" component (normalizers, pre-tokenizers, decoders): obj[list_key]
// parsed element by element with parse(element, where_of_element); steps that parse to null
// (no-ops) are dropped.
template <class Step, class Parse>
std::vector<std::unique_ptr<Step>> parse_sequence_steps(const Json& obj, const char* list_key,
                                                        const std::string& where, Parse&& parse) {
  const Json& list = require_field(obj, list_key, where);
  HG_CHECK(list.is_array(), where, ".", list_key, " must be an array");
  std::vector<std::unique_ptr<Step>> steps;
  for (std::size_t i = 0; i < list.size(); ++i) {
    auto step = parse(list[i], concat(where, ".", list_key, "[", i, "]"));
    if (step) steps.push_back(std::move(step));
  }
  return steps;
}

}  // namespace hydragen::tok
