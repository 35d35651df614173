#include "chat/template.h"

#include "chat/json_values.h"
#include "chat/parser.h"
#include "chat/renderer.h"

namespace hydragen::chat {

namespace {

template <class Json>
std::string render_json(const Program& program, const Json& context, const RenderOptions& options) {
  if (!context.is_object()) fail("chat template: the render context must be a JSON object, got ", context.type_name());
  Value ctx;
  try {
    ctx = value_from_json(context);
  } catch (const EvalError& e) {
    fail("chat template context: ", e.what());
  }
  Renderer renderer(program, options);
  try {
    return renderer.render(ctx.dict());
  } catch (const EvalError& e) {  // every statement converts its own; this is a safety net
    fail("chat template: ", e.what());
  }
}

}  // namespace

Template Template::parse(const std::string& source) { return Template(parse_program(source)); }

std::string Template::render(const nlohmann::json& context, const RenderOptions& options) const {
  return render_json(*program_, context, options);
}

std::string Template::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return render_json(*program_, context, options);
}

nlohmann::ordered_json chat_context(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                    bool add_generation_prompt, const std::string& bos_token,
                                    const std::string& eos_token, const nlohmann::ordered_json& extra) {
  HG_CHECK(messages.is_array(), "chat_context: messages must be a JSON array, got ", messages.type_name());
  HG_CHECK(tools.is_null() || tools.is_array(), "chat_context: tools must be null or a JSON array, got ", tools.type_name());
  HG_CHECK(extra.is_object(), "chat_context: extra must be a JSON object, got ", extra.type_name());
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
  return context;
}

}  // namespace hydragen::chat
