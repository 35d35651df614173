// libFuzzer target: arbitrary bytes as a chat template (src/chat, instrumented), parsed and, if
// that succeeds, rendered with a fixed conversation (system, user, assistant with a tool call,
// tool result) and tools. Passes when parse and render return or throw hydragen::Error, with no
// sanitizer report (UBSan does not recover).
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/template.h"
#include "hydragen/error.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json c = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful. ΣΊΣΥΦΟΣ 日本語"},
      {"role": "user", "content": "  What's the weather in Paris? 😀 "},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
        "function": {"name": "get_weather", "arguments": {"location": "Paris", "days": 2}}}]},
      {"role": "tool", "tool_call_id": "call12345", "content": "{\"temperature\": 21.5}"},
      {"role": "assistant", "content": "<think>\nok\n</think>\n\nIt is 21.5 degrees."},
      {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
      "parameters": {"type": "object", "properties": {"location": {"type": "string"}, "days": {"type": "integer"}},
      "required": ["location"]}}}],
    "documents": null, "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>",
    "n": 3, "f": 2.5, "flag": false
  })");
  return c;
}

const hydragen::chat::RenderOptions& options() {
  static const hydragen::chat::RenderOptions o = [] {
    hydragen::chat::RenderOptions r;
    r.limits.max_output_bytes = 1u << 16;  // small limits keep each input fast
    r.limits.max_items = 1u << 12;
    r.limits.max_steps = 20'000;
    std::tm tm{};
    tm.tm_year = 124;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    r.now = [tm] { return tm; };
    return r;
  }();
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  try {
    const hydragen::chat::Template t = hydragen::chat::Template::parse(source);
    const std::string out = t.render(context(), options());
    if (out.size() > options().limits.max_output_bytes) __builtin_trap();  // the limit held
  } catch (const hydragen::Error&) {
  }
  return 0;
}
