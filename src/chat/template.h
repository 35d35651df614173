// Chat templates: the Jinja programs in Hugging Face tokenizer configs that turn a
// conversation into the prompt text. Template::parse checks a template once (everything the
// interpreter cannot run is refused here, naming the construct and its line:column);
// Template::render then produces exactly what transformers' apply_chat_template (jinja2 with
// trim_blocks, lstrip_blocks, loopcontrols, raise_exception, strftime_now and its tojson)
// gives, or throws. Rendering is const and safe from several threads at once.
#pragma once

#include <cstddef>
#include <ctime>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "hydragen/error.h"

namespace hydragen::chat {

// A template that cannot be parsed or rendered. what() is "chat template line L:C: <message>";
// message() is the bare text (for raise_exception, the template's own message).
class TemplateError : public Error {
 public:
  TemplateError(const std::string& message, int line, int column, bool raised);
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  int column() const { return column_; }
  bool raised() const { return raised_; }  // thrown by the template's raise_exception(...)

 private:
  std::string message_;
  int line_, column_;
  bool raised_;
};

// Bounds against hostile templates and inputs; a render past one throws TemplateError.
struct RenderLimits {
  std::size_t max_output_bytes = 16u << 20;  // the prompt, and every string made on the way
  std::size_t max_items = 1u << 20;          // elements of a list made by + or *
  std::size_t max_steps = 1'000'000;         // loop iterations + calls of filters, functions, macros
  int max_call_depth = 64;                   // macros calling macros
};

struct RenderOptions {
  RenderLimits limits;
  // The local time strftime_now() formats; the current local time when empty.
  std::function<std::tm()> now;
};

struct Program;

class Template {
 public:
  // Throws TemplateError naming the construct and line:column it cannot run.
  static Template parse(const std::string& source);

  // context: {"messages": [...], "add_generation_prompt": bool, "bos_token": str,
  //           "eos_token": str, "tools": [...] (optional), other kwargs}. Throws
  // TemplateError on a runtime error (raise_exception's message, bad types), with position.
  // nlohmann::json sorts object keys; pass an ordered_json to keep the client's key order,
  // which tojson prints (transformers keeps it).
  std::string render(const nlohmann::json& context, const RenderOptions& options = {}) const;
  std::string render(const nlohmann::ordered_json& context, const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

// transformers' render context: messages, tools (null when absent), documents null,
// add_generation_prompt, bos_token / eos_token, then `extra` (chat_template_kwargs).
nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                    bool add_generation_prompt, const std::string& bos_token,
                                    const std::string& eos_token,
                                    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

// The model's template: `override_file` when not empty, else chat_template.jinja, else
// tokenizer_config.json's chat_template ("default" of a list); bos/eos strings from
// tokenizer_config.json. Throws naming the file when there is none or it cannot be parsed.
struct ChatTemplateSource {
  std::string source, bos_token, eos_token, origin;
};
ChatTemplateSource load_chat_template(const std::string& model_dir, const std::string& override_file = "");

}  // namespace hydragen::chat
