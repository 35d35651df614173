#include "server/openai_request.h"

#include <cmath>
#include <limits>

#include "chat/openai_messages.h"
#include "core/json_reader.h"
#include "sample/sampling.h"
#include "server/api_error.h"

namespace hydragen::server {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr int kMaxStopStrings = 16;
constexpr std::size_t kMaxStopBytes = 256;

const char* type_name(const json& v) { return v.type_name(); }

// body[key] when present and not null, else nullptr.
const json* field(const json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& v, const char* key) {
  if (!v.is_number()) bad_request(key, "'", key, "' must be a number, got ", type_name(v));
  const double x = v.get<double>();
  if (!std::isfinite(x)) bad_request(key, "'", key, "' must be finite");
  return x;
}

std::int64_t integer(const json& v, const char* key) {
  if (v.is_number_float()) {
    const double x = v.get<double>();
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9e15) return static_cast<std::int64_t>(x);
  }
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
    bad_request(key, "'", key, "' is too large");
  if (!v.is_number_integer()) bad_request(key, "'", key, "' must be an integer, got ", type_name(v));
  return v.get<std::int64_t>();
}

bool boolean(const json& v, const char* key) {
  if (!v.is_boolean()) bad_request(key, "'", key, "' must be a boolean, got ", type_name(v));
  return v.get<bool>();
}

float in_range(const json& body, const char* key, float fallback, double lo, double hi, bool lo_open = false) {
  const json* v = field(body, key);
  if (v == nullptr) return fallback;
  const double x = number(*v, key);
  if (x < lo || x > hi || (lo_open && x == lo))
    bad_request(key, "'", key, "' must be in ", lo_open ? "(" : "[", lo, ", ", hi, "], got ", x);
  return static_cast<float>(x);
}

std::vector<std::int32_t> token_ids(const json& list, const ModelInfo& model, const std::string& param) {
  std::vector<std::int32_t> ids;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    if (!t.is_number_integer()) bad_request(param, "'", param, "' item ", i, " must be a token id, got ", type_name(t));
    const std::int64_t id = t.get<std::int64_t>();
    if (id < 0 || (model.vocab > 0 && id >= model.vocab))
      bad_request(param, "'", param, "' item ", i, " (", id, ") is outside the vocabulary [0, ", model.vocab, ")");
    ids.push_back(static_cast<std::int32_t>(id));
  }
  return ids;
}

std::vector<std::int32_t> encode(const std::string& text, const ModelInfo& model, bool special, const char* param) {
  if (model.tokenizer == nullptr)
    bad_request(param, "this model has no tokenizer: give '", param, "' as token ids");
  try {
    return model.tokenizer->encode(text, special);
  } catch (const Error& e) {
    bad_request(param, "'", param, "' cannot be tokenized: ", e.what());
  }
}

std::string decode(const std::vector<std::int32_t>& ids, const ModelInfo& model) {
  return model.tokenizer ? model.tokenizer->decode(ids, true) : std::string();
}

// The four forms of `prompt`: a string, strings, token ids, lists of token ids.
void read_prompts(const json& body, const ModelInfo& model, OpenAiRequest& r) {
  const json* p = field(body, "prompt");
  if (p == nullptr) bad_request("prompt", "'prompt' is required");
  auto add_text = [&](const std::string& text) {
    r.prompts.push_back(encode(text, model, true, "prompt"));
    r.prompt_texts.push_back(text);
  };
  auto add_ids = [&](const json& list, const std::string& param) {
    r.prompts.push_back(token_ids(list, model, param));
    r.prompt_texts.push_back(decode(r.prompts.back(), model));
  };
  if (p->is_string()) {
    add_text(p->get<std::string>());
  } else if (p->is_array()) {
    if (p->empty()) bad_request("prompt", "'prompt' may not be an empty list");
    if ((*p)[0].is_number()) {
      add_ids(*p, "prompt");
    } else {
      if (p->size() > static_cast<std::size_t>(model.max_prompts))
        bad_request("prompt", "'prompt' holds ", p->size(), " prompts; at most ", model.max_prompts);
      for (std::size_t i = 0; i < p->size(); ++i) {
        const json& item = (*p)[i];
        if (item.is_string()) add_text(item.get<std::string>());
        else if (item.is_array()) add_ids(item, "prompt[" + std::to_string(i) + "]");
        else bad_request("prompt", "'prompt' item ", i, " must be a string or a list of token ids, got ", type_name(item));
      }
    }
  } else {
    bad_request("prompt", "'prompt' must be a string, a list of strings, token ids or lists of token ids, got ",
                type_name(*p));
  }
  for (const auto& prompt : r.prompts)
    if (prompt.empty()) bad_request("prompt", "a prompt is empty (no tokens)");
}

std::vector<std::string> stop_strings(const json& body, const ModelInfo& model) {
  const json* s = field(body, "stop");
  if (s == nullptr) return {};
  std::vector<std::string> out;
  if (s->is_string()) out.push_back(s->get<std::string>());
  else if (s->is_array()) {
    for (const json& item : *s) {
      if (!item.is_string()) bad_request("stop", "'stop' items must be strings, got ", type_name(item));
      out.push_back(item.get<std::string>());
    }
  } else {
    bad_request("stop", "'stop' must be a string or a list of strings, got ", type_name(*s));
  }
  if (out.size() > kMaxStopStrings) bad_request("stop", "'stop' holds ", out.size(), " strings; at most ", kMaxStopStrings);
  for (const std::string& stop : out) {
    if (stop.empty()) bad_request("stop", "'stop' may not hold an empty string");
    if (stop.size() > kMaxStopBytes) bad_request("stop", "a stop string is longer than ", kMaxStopBytes, " bytes");
  }
  if (!out.empty() && model.tokenizer == nullptr)
    bad_request("stop", "this model has no tokenizer: stop strings cannot be matched");
  return out;
}

json parse_body(std::string_view text) {
  json body;
  try {
    body = parse_json(text, "request body");
  } catch (const Error& e) {
    throw ApiError(400, std::string("invalid JSON: ") + e.what());
  }
  if (!body.is_object()) throw ApiError(400, std::string("the request body must be a JSON object, got ") + body.type_name());
  return body;
}

// Fields both endpoints share: model, n, sampling, penalties, seed, stop, stream, logit_bias.
void read_common(const json& body, const ModelInfo& model, OpenAiRequest& r) {
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) bad_request("model", "'model' must be a string, got ", type_name(*m));
    r.model = m->get<std::string>();
    if (r.model != model.name)
      throw ApiError(400, "the model '" + r.model + "' does not exist; this server serves '" + model.name + "'",
                     "model", "invalid_request_error", "model_not_found");
  }
  engine::GenerationRequest& g = r.base;
  if (const json* n = field(body, "n")) {
    const std::int64_t v = integer(*n, "n");
    if (v < 1 || v > model.max_n) bad_request("n", "'n' must be in [1, ", model.max_n, "], got ", v);
    g.n = static_cast<int>(v);
  }
  sample::SamplingParams& s = g.sampling;
  s.temperature = in_range(body, "temperature", 1.f, 0, 2);
  s.top_p = in_range(body, "top_p", 1.f, 0, 1, /*lo_open=*/true);
  s.min_p = in_range(body, "min_p", 0.f, 0, 1);
  s.presence_penalty = in_range(body, "presence_penalty", 0.f, -2, 2);
  s.frequency_penalty = in_range(body, "frequency_penalty", 0.f, -2, 2);
  s.repetition_penalty = in_range(body, "repetition_penalty", 1.f, 0, 1e6, /*lo_open=*/true);
  if (const json* k = field(body, "top_k")) {
    const std::int64_t v = integer(*k, "top_k");
    if (v < -1 || v > INT32_MAX) bad_request("top_k", "'top_k' must be -1, 0 (off) or a count, got ", v);
    s.top_k = v < 0 ? 0 : static_cast<std::int32_t>(v);
  }
  if (const json* seed = field(body, "seed")) {
    s.seed = static_cast<std::uint64_t>(integer(*seed, "seed"));
    r.seeded = true;
  }
  if (const json* bias = field(body, "logit_bias")) {
    if (!bias->is_object()) bad_request("logit_bias", "'logit_bias' must be an object, got ", type_name(*bias));
    if (!bias->empty()) bad_request("logit_bias", "'logit_bias' is not supported by this server");
  }
  if (const json* user = field(body, "user"); user && !user->is_string())
    bad_request("user", "'user' must be a string, got ", type_name(*user));
  g.stop_strings = stop_strings(body, model);
  g.stop_token_ids = model.eos_ids;
  if (const json* ignore = field(body, "ignore_eos"); ignore && boolean(*ignore, "ignore_eos")) g.stop_token_ids.clear();
  if (const json* stream = field(body, "stream")) r.stream = boolean(*stream, "stream");
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) bad_request("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad_request("stream_options", "'stream_options' needs 'stream': true");
    if (const json* usage = field(*options, "include_usage")) r.include_usage = boolean(*usage, "stream_options.include_usage");
  }
}

// max_tokens (and the chat's max_completion_tokens) against the context.
void read_max_tokens(const json& body, const ModelInfo& model, OpenAiRequest& r, std::int64_t fallback) {
  std::int64_t longest = 0;
  for (const auto& p : r.prompts) longest = std::max<std::int64_t>(longest, static_cast<std::int64_t>(p.size()));
  const char* key = nullptr;
  for (const char* k : {"max_completion_tokens", "max_tokens"})
    if (field(body, k) && (r.chat || std::string(k) == "max_tokens")) key = k;
  std::int64_t tokens = fallback;
  if (key != nullptr) {
    tokens = integer(*field(body, key), key);
    if (tokens <= 0) bad_request(key, "'", key, "' must be at least 1, got ", tokens);
  } else if (model.context > 0) {
    tokens = std::min(fallback, model.context - longest);
  }
  if (model.context > 0 && longest >= model.context)
    bad_request(r.chat ? "messages" : "prompt", "the prompt is ", longest, " tokens; the model's context is ",
                model.context);
  if (model.context > 0 && longest + tokens > model.context)
    bad_request(key ? key : "max_tokens", "the prompt (", longest, " tokens) and ", key ? key : "max_tokens", " (",
                tokens, ") pass the model's context of ", model.context, " tokens");
  r.base.max_new_tokens = tokens;
}

void check_sequences(const ModelInfo& model, const OpenAiRequest& r) {
  const auto sequences = static_cast<std::int64_t>(r.prompts.size()) * r.base.n;
  if (sequences > model.max_sequences)
    bad_request("n", "the request asks for ", sequences, " sequences (prompts x n); this server takes at most ",
                model.max_sequences, " at once");
  try {
    sample::validate(r.base.sampling);
  } catch (const Error& e) {
    bad_request("", e.what());
  }
}

}  // namespace

OpenAiRequest parse_completion_request(std::string_view text, const ModelInfo& model) {
  const json body = parse_body(text);
  OpenAiRequest r;
  read_common(body, model, r);
  read_prompts(body, model, r);
  if (const json* echo = field(body, "echo")) r.echo = boolean(*echo, "echo");
  if (const json* lp = field(body, "logprobs")) {
    const std::int64_t v = integer(*lp, "logprobs");
    if (v < 0 || v > sample::kMaxTopLogprobs)
      bad_request("logprobs", "'logprobs' must be in [0, ", sample::kMaxTopLogprobs, "], got ", v);
    r.logprobs = true;
    r.top_logprobs = static_cast<int>(v);
    if (r.echo) bad_request("echo", "'echo' with 'logprobs' (the prompt's logprobs) is not supported");
  }
  if (const json* suffix = field(body, "suffix"))
    if (!suffix->is_string() || !suffix->get<std::string>().empty())
      bad_request("suffix", "'suffix' is not supported");
  read_max_tokens(body, model, r, 16);
  r.base.sampling.logprobs = r.top_logprobs;
  check_sequences(model, r);
  return r;
}

OpenAiRequest parse_chat_request(std::string_view text, const ModelInfo& model) {
  const json body = parse_body(text);
  OpenAiRequest r;
  r.chat = true;
  read_common(body, model, r);
  if (model.chat_template == nullptr || model.tokenizer == nullptr)
    bad_request("messages", "this model has no chat template (start the server with --chat-template FILE)");
  const ordered_json raw = ordered_json::parse(text);  // valid: parse_body read it; keeps key order for tojson
  const auto messages = raw.find("messages");
  if (messages == raw.end() || messages->is_null()) bad_request("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty()) bad_request("messages", "'messages' must be a non-empty list");
  ordered_json tools = nullptr;
  if (const auto t = raw.find("tools"); t != raw.end() && !t->is_null()) {
    if (!t->is_array()) bad_request("tools", "'tools' must be a list");
    tools = *t;
  }
  ordered_json kwargs = ordered_json::object();
  if (const auto k = raw.find("chat_template_kwargs"); k != raw.end() && !k->is_null()) {
    if (!k->is_object()) bad_request("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    kwargs = *k;
  }
  std::string prompt;
  try {
    prompt = model.chat_template->render(
        chat::chat_context(chat::template_messages(*messages), tools, true, model.bos_token, model.eos_token, kwargs));
  } catch (const Error& e) {
    bad_request("messages", e.what());
  }
  r.prompts.push_back(encode(prompt, model, false, "messages"));
  r.prompt_texts.push_back(prompt);
  if (r.prompts[0].empty()) bad_request("messages", "the rendered conversation holds no tokens");
  if (const json* lp = field(body, "logprobs")) r.logprobs = boolean(*lp, "logprobs");
  if (const json* top = field(body, "top_logprobs")) {
    const std::int64_t v = integer(*top, "top_logprobs");
    if (v < 0 || v > sample::kMaxTopLogprobs)
      bad_request("top_logprobs", "'top_logprobs' must be in [0, ", sample::kMaxTopLogprobs, "], got ", v);
    if (!r.logprobs && v > 0) bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.top_logprobs = static_cast<int>(v);
  }
  read_max_tokens(body, model, r, std::numeric_limits<std::int32_t>::max());
  r.base.sampling.logprobs = r.top_logprobs;
  check_sequences(model, r);
  return r;
}

}  // namespace hydragen::server
