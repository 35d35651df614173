// load_chat_template: the template of a model folder and the bos/eos strings it renders with.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "chat/template.h"
#include "core/json_reader.h"
#include "core/regular_file.h"
#include "tokenizer/json_util.h"

namespace hydragen::chat {

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr std::uintmax_t kMaxTemplateBytes = 1u << 20;
constexpr std::uintmax_t kMaxConfigBytes = 64u << 20;  // tokenizer_config.json lists every added token

// A regular file of at most max_bytes (core/regular_file.h: a FIFO or a directory is refused).
std::string read_file(const fs::path& file, std::uintmax_t max_bytes) {
  try {
    return read_regular_file(file, max_bytes);
  } catch (const Error& e) {
    fail("chat template: ", e.what());
  }
}

// The parsed JSON object of `file` (the bounded reader), or null when there is no such file.
Json read_json(const fs::path& file) {
  if (!fs::exists(file)) return Json();
  Json j;
  try {
    j = read_json_file(file, {kMaxConfigBytes});
  } catch (const Error& e) {
    fail("chat template: ", e.what());
  }
  HG_CHECK(j.is_object(), "chat template: ", file.string(), " must hold a JSON object");
  return j;
}

// tokenizer_config.json's chat_template: a string, or a list of {name, template} ("default").
std::string config_template(const Json& config, const fs::path& file) {
  const Json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  HG_CHECK(t.is_array(), "chat template: ", file.string(), ": chat_template must be a string or a list of {name, template}");
  for (const Json& entry : t) {
    HG_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() && entry.contains("template") &&
                 entry["template"].is_string(),
             "chat template: ", file.string(), ": every chat_template entry must be {\"name\": str, \"template\": str}");
    if (entry["name"] == "default") return entry["template"].get<std::string>();
  }
  fail("chat template: ", file.string(), ": chat_template lists no template named \"default\"");
}

}  // namespace

ChatTemplateSource load_chat_template(const std::string& model_dir, const std::string& override_file) {
  const fs::path dir(model_dir);
  const fs::path config_file = dir / "tokenizer_config.json";
  const Json config = model_dir.empty() ? Json() : read_json(config_file);
  const Json special = model_dir.empty() ? Json() : read_json(dir / "special_tokens_map.json");

  ChatTemplateSource out;
  if (!override_file.empty()) {
    out.source = read_file(override_file, kMaxTemplateBytes);
    out.origin = override_file;
  } else if (!model_dir.empty() && fs::exists(dir / "chat_template.jinja")) {
    out.origin = (dir / "chat_template.jinja").string();
    out.source = read_file(dir / "chat_template.jinja", kMaxTemplateBytes);
  } else if (config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null()) {
    out.origin = config_file.string();
    out.source = config_template(config, config_file);
  } else {
    fail("chat template: ", model_dir, " has no chat template (no chat_template.jinja, and ",
         fs::exists(config_file) ? "tokenizer_config.json has no chat_template" : "no tokenizer_config.json",
         "); pass a template file");
  }
  const std::string special_file = (dir / "special_tokens_map.json").string();
  out.bos_token = tok::token_text(config, "bos_token", config_file.string());
  out.eos_token = tok::token_text(config, "eos_token", config_file.string());
  if (out.bos_token.empty()) out.bos_token = tok::token_text(special, "bos_token", special_file);
  if (out.eos_token.empty()) out.eos_token = tok::token_text(special, "eos_token", special_file);
  try {
    Template::parse(out.source);
  } catch (const TemplateError& e) {
    fail(out.origin, ": ", e.what());
  }
  return out;
}

}  // namespace hydragen::chat
