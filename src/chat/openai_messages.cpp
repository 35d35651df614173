#include "chat/openai_messages.h"

#include <algorithm>
#include <string>

#include "hydragen/error.h"

namespace hydragen::chat {

namespace {

using OJson = nlohmann::ordered_json;

constexpr int kMaxArgumentsNesting = 64;  // of [ and { in a tool call's arguments

// How deep [ and { nest in JSON text (outside its strings), so nothing deeper is parsed.
int json_nesting(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// A list of text parts as one string.
std::string joined_text(const OJson& parts, const std::string& where) {
  std::string text;
  for (std::size_t j = 0; j < parts.size(); ++j) {
    const OJson& part = parts[j];
    const std::string at = where + "[" + std::to_string(j) + "]";
    HG_CHECK(part.is_object(), at, " must be an object {\"type\": \"text\", \"text\": ...}, got ", part.type_name());
    HG_CHECK(part.contains("type") && part["type"] == "text", at, ".type must be \"text\" (only text is supported), got ",
             part.contains("type") ? part["type"].dump() : std::string("nothing"));
    HG_CHECK(part.contains("text") && part["text"].is_string(), at, ".text must be a string");
    if (j > 0) text += '\n';
    text += part["text"].get<std::string>();
  }
  return text;
}

// function.arguments as an object: kept when it is one, parsed when it is a JSON string.
void parse_arguments(OJson& call, const std::string& where) {
  if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) return;
  OJson& function = call["function"];
  if (!function.contains("arguments") || !function["arguments"].is_string()) return;
  const std::string at = where + ".function.arguments";
  HG_CHECK(json_nesting(function["arguments"].get<std::string>()) <= kMaxArgumentsNesting, at, " nests deeper than ",
           kMaxArgumentsNesting, " levels");
  OJson parsed;
  try {
    parsed = OJson::parse(function["arguments"].get<std::string>());
  } catch (const OJson::exception& e) {
    fail(at, " must be a JSON object in a string: ", e.what());
  }
  HG_CHECK(parsed.is_object(), at, " must be a JSON object in a string, got ", parsed.type_name());
  function["arguments"] = std::move(parsed);
}

}  // namespace

OJson template_messages(const OJson& messages) {
  HG_CHECK(messages.is_array(), "messages must be a list, got ", messages.type_name());
  OJson out = messages;
  for (std::size_t i = 0; i < out.size(); ++i) {
    OJson& m = out[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    HG_CHECK(m.is_object(), where, " must be an object, got ", m.type_name());
    if (m.contains("content") && m["content"].is_array()) m["content"] = joined_text(m["content"], where + ".content");
    if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
      for (std::size_t k = 0; k < m["tool_calls"].size(); ++k) {
        parse_arguments(m["tool_calls"][k], where + ".tool_calls[" + std::to_string(k) + "]");
      }
    }
  }
  return out;
}

}  // namespace hydragen::chat
