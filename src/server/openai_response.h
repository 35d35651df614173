// OpenAI's response bodies from engine events: the text of each choice as it streams (its
// tokens decoded, cut before a stop string), logprobs in the completions and the chat forms,
// whole responses, stream chunks and usage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "engine/stop_text.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace hydragen::server {

// One choice (a sample of a prompt) as its tokens arrive.
class ChoiceState {
 public:
  ChoiceState(const ModelInfo& model, const OpenAiRequest& request, int index);
  // The token's text that became safe to show, and its logprobs entry (when asked) appended.
  std::string push(const engine::TokenEvent& token);
  // What is held back, when the choice finishes; records the finish reason.
  std::string finish(const engine::Completion& completion);
  // The logprobs of the tokens pushed since the last call ({} or null when not asked).
  nlohmann::json take_logprobs();
  // All of them (a whole response).
  nlohmann::json all_logprobs() const;

  int index() const { return index_; }
  const std::string& text() const { return text_; }
  const std::string& finish_reason() const { return finish_reason_; }
  const std::string& error() const { return error_; }
  std::int64_t tokens() const { return tokens_; }
  bool finished() const { return finished_; }
  const std::vector<std::int32_t>& token_ids() const { return ids_; }

 private:
  nlohmann::json entry_range(std::size_t begin, std::size_t end) const;

  const ModelInfo& model_;
  const OpenAiRequest& request_;
  int index_;
  std::optional<StreamDecoder> decoder_;
  engine::StopStringFilter filter_;
  std::string text_;  // shown so far
  std::vector<std::int32_t> ids_;
  std::vector<float> logprobs_;
  std::vector<std::vector<sample::TokenLogprob>> top_;
  std::size_t taken_ = 0;  // logprob entries already streamed
  std::int64_t tokens_ = 0;
  std::string finish_reason_, error_;
  bool finished_ = false;
};

// "stop" or "length" as OpenAI names them (a cancelled one reads "stop").
std::string openai_finish_reason(const std::string& engine_reason);

nlohmann::json usage_json(std::int64_t prompt_tokens, std::int64_t completion_tokens);

// A whole response of the choices in index order.
nlohmann::json completion_response(const OpenAiRequest& request, const std::vector<ChoiceState>& choices,
                                   const std::string& id, std::int64_t created, const std::string& model,
                                   std::int64_t prompt_tokens);

// One stream chunk of one choice: a text piece (the chat's delta), its logprobs, its finish
// reason once finished (null before), and the ids of its tokens (an extension, as vLLM's
// return_token_ids: a model without a tokenizer streams ids only).
nlohmann::json stream_chunk(const OpenAiRequest& request, const std::string& id, std::int64_t created,
                            const std::string& model, int index, const std::string& text, bool first,
                            const nlohmann::json& logprobs, const std::string* finish_reason,
                            const std::vector<std::int32_t>& token_ids = {});

// The last chunk of stream_options.include_usage: no choices, the usage.
nlohmann::json usage_chunk(const OpenAiRequest& request, const std::string& id, std::int64_t created,
                           const std::string& model, std::int64_t prompt_tokens, std::int64_t completion_tokens);

}  // namespace hydragen::server
