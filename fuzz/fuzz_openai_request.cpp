// libFuzzer target: one HTTP body of POST /v1/completions and of /v1/chat/completions (client
// input) through the server's parsers, with the demo model's tokenizer and a ChatML template.
// Each must give a request or an ApiError; nothing else may escape. A request must be one the
// engine can take (prompts non-empty and inside the vocabulary, n and max_tokens in range,
// prompt + max_tokens inside the context, sampling that passes the sampler's checks); an
// error's body must dump as valid UTF-8 JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "core/utf8.h"
#include "sample/sampling.h"
#include "server/api_error.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace {

using hydragen::server::ModelInfo;

const ModelInfo& model() {
  static const std::unique_ptr<hydragen::Tokenizer> tokenizer =
      hydragen::load_tokenizer(std::filesystem::path(HYDRAGEN_SOURCE_DIR) / "models" / "demo");
  static const hydragen::chat::Template chat = hydragen::chat::Template::parse(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
      "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
  static const ModelInfo info = [] {
    ModelInfo m;
    m.name = "demo";
    m.tokenizer = tokenizer.get();
    m.chat_template = &chat;
    m.eos_ids = {4095};
    m.context = 256;
    m.vocab = 4096;
    m.max_n = 16;
    m.max_prompts = 8;
    m.max_sequences = 64;
    return m;
  }();
  return info;
}

void check(const hydragen::server::OpenAiRequest& r, const ModelInfo& m) {
  if (r.prompts.empty() || r.prompts.size() != r.prompt_texts.size()) std::abort();
  if (r.base.n < 1 || r.base.n > m.max_n || r.base.max_new_tokens < 1) std::abort();
  if (static_cast<std::int64_t>(r.prompts.size()) * r.base.n > m.max_sequences) std::abort();
  for (const auto& prompt : r.prompts) {
    if (prompt.empty() || static_cast<std::int64_t>(prompt.size()) + r.base.max_new_tokens > m.context) std::abort();
    for (std::int32_t id : prompt)
      if (id < 0 || id >= m.vocab) std::abort();
  }
  if (r.top_logprobs < 0 || r.top_logprobs > hydragen::sample::kMaxTopLogprobs) std::abort();
  try {
    hydragen::sample::validate(r.base.sampling);
  } catch (const hydragen::Error&) {
    std::abort();
  }
}

void one(std::string_view body, bool chat) {
  const ModelInfo& m = model();
  try {
    check(chat ? hydragen::server::parse_chat_request(body, m) : hydragen::server::parse_completion_request(body, m), m);
  } catch (const hydragen::server::ApiError& e) {
    if (e.status() != 400) std::abort();
    const std::string text = e.body().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (hydragen::utf8_invalid_at(text) != std::string::npos) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  one(body, false);
  one(body, true);
  return 0;
}
