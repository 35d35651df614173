// OpenAI's request bodies (POST /v1/completions, POST /v1/chat/completions) as engine
// requests. The body goes through core/json_reader (bounded, UTF-8 checked); every field is
// checked for its type and range, and a bad one is an ApiError 400 naming it. Unknown fields
// are ignored, as OpenAI's API does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "chat/template.h"
#include "engine/request.h"
#include "tokenizer/tokenizer.h"

namespace hydragen::server {

// What requests are checked against: the model's name, tokenizer and chat template (either may
// be null), its context and vocabulary, and the server's limits.
struct ModelInfo {
  std::string name;
  const Tokenizer* tokenizer = nullptr;
  const chat::Template* chat_template = nullptr;
  std::string bos_token, eos_token;     // the chat template's
  std::vector<std::int32_t> eos_ids;    // every request stops at these
  std::int64_t context = 0;             // positions (0: unbounded)
  std::int64_t vocab = 0;
  int max_n = 128;                      // n in [1, max_n]
  int max_prompts = 64;                 // prompts of one completions request
  std::int64_t max_sequences = 1 << 20; // prompts x n of one request
};

struct OpenAiRequest {
  bool chat = false;
  std::string model;
  std::vector<std::vector<std::int32_t>> prompts;  // one engine request each (chat: one)
  std::vector<std::string> prompt_texts;           // their text, for echo ("" without a tokenizer)
  engine::GenerationRequest base;                  // everything but the prompt
  bool seeded = false;                             // `seed` was given (else the server draws one)
  bool stream = false, include_usage = false, echo = false;
  bool logprobs = false;  // each token's logprob in the response
  int top_logprobs = 0;   // and its top-N
};

// Throws ApiError (400) naming the field; any other failure of the body is a 400 too.
OpenAiRequest parse_completion_request(std::string_view body, const ModelInfo& model);
OpenAiRequest parse_chat_request(std::string_view body, const ModelInfo& model);

}  // namespace hydragen::server
