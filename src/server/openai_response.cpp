#include "server/openai_response.h"

#include "core/utf8.h"

namespace hydragen::server {

using nlohmann::json;

namespace {

// A token's text for logprobs: its decoding alone (specials kept), lossy where it is part of a
// character.
std::string token_text(const ModelInfo& model, std::int32_t id) {
  if (model.tokenizer == nullptr) return std::to_string(id);
  const std::int32_t one[] = {id};
  return model.tokenizer->decode(one, false);
}

json bytes_of(const std::string& text) {
  json out = json::array();
  for (unsigned char c : text) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

ChoiceState::ChoiceState(const ModelInfo& model, const OpenAiRequest& request, int index)
    : model_(model), request_(request), index_(index), filter_(request.base.stop_strings) {
  if (model.tokenizer) decoder_.emplace(*model.tokenizer, /*skip_special_tokens=*/true);
}

std::string ChoiceState::push(const engine::TokenEvent& token) {
  ++tokens_;
  ids_.push_back(token.token);
  if (request_.logprobs) {
    logprobs_.push_back(token.logprob);
    top_.push_back(token.top_logprobs);
  }
  if (!decoder_ || filter_.stopped()) return {};
  std::string piece = filter_.push(decoder_->push(token.token));
  text_ += piece;
  return piece;
}

std::string ChoiceState::finish(const engine::Completion& completion) {
  finished_ = true;
  finish_reason_ = completion.finish_reason;
  error_ = completion.error;
  if (!decoder_) return {};
  std::string piece = filter_.stopped() ? std::string() : filter_.push(decoder_->flush());
  piece += filter_.finish();
  text_ += piece;
  return piece;
}

json ChoiceState::entry_range(std::size_t begin, std::size_t end) const {
  if (!request_.logprobs) return nullptr;
  if (request_.chat) {
    json content = json::array();
    for (std::size_t i = begin; i < end; ++i) {
      const std::string text = utf8_lossy(token_text(model_, ids_[i]));
      json top = json::array();
      for (const sample::TokenLogprob& t : top_[i]) {
        const std::string tt = utf8_lossy(token_text(model_, t.token));
        top.push_back({{"token", tt}, {"logprob", t.logprob}, {"bytes", bytes_of(tt)}});
      }
      content.push_back({{"token", text}, {"logprob", logprobs_[i]}, {"bytes", bytes_of(text)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < begin; ++i) offset += static_cast<std::int64_t>(token_text(model_, ids_[i]).size());
  for (std::size_t i = begin; i < end; ++i) {
    const std::string text = utf8_lossy(token_text(model_, ids_[i]));
    tokens.push_back(text);
    lps.push_back(logprobs_[i]);
    json top = json::object();
    for (const sample::TokenLogprob& t : top_[i]) top[utf8_lossy(token_text(model_, t.token))] = t.logprob;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += static_cast<std::int64_t>(text.size());
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json ChoiceState::take_logprobs() {
  const json out = entry_range(taken_, logprobs_.size());
  taken_ = logprobs_.size();
  return out;
}

json ChoiceState::all_logprobs() const { return entry_range(0, logprobs_.size()); }

std::string openai_finish_reason(const std::string& engine_reason) {
  return engine_reason == "length" ? "length" : "stop";
}

json usage_json(std::int64_t prompt_tokens, std::int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

json completion_response(const OpenAiRequest& request, const std::vector<ChoiceState>& choices, const std::string& id,
                         std::int64_t created, const std::string& model, std::int64_t prompt_tokens) {
  json out_choices = json::array();
  std::int64_t completion_tokens = 0;
  for (const ChoiceState& c : choices) {
    completion_tokens += c.tokens();
    json choice = {{"index", c.index()}, {"logprobs", c.all_logprobs()},
                   {"finish_reason", openai_finish_reason(c.finish_reason())}};
    if (request.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text()}};
    } else {
      const std::size_t prompt = static_cast<std::size_t>(c.index() / request.base.n);
      choice["text"] = (request.echo ? request.prompt_texts[prompt] : std::string()) + c.text();
    }
    choice["token_ids"] = c.token_ids();  // an extension (vLLM's return_token_ids): models without a tokenizer
    out_choices.push_back(std::move(choice));
  }
  return {{"id", id},
          {"object", request.chat ? "chat.completion" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", out_choices},
          {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

json stream_chunk(const OpenAiRequest& request, const std::string& id, std::int64_t created, const std::string& model,
                  int index, const std::string& text, bool first, const json& logprobs,
                  const std::string* finish_reason, const std::vector<std::int32_t>& token_ids) {
  json choice = {{"index", index}, {"logprobs", logprobs},
                 {"finish_reason", finish_reason ? json(openai_finish_reason(*finish_reason)) : json(nullptr)}};
  if (request.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !finish_reason)) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  if (!token_ids.empty()) choice["token_ids"] = token_ids;
  json chunk = {{"id", id},
                {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array({choice})}};
  if (request.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

json usage_chunk(const OpenAiRequest& request, const std::string& id, std::int64_t created, const std::string& model,
                 std::int64_t prompt_tokens, std::int64_t completion_tokens) {
  return {{"id", id},
          {"object", request.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", usage_json(prompt_tokens, completion_tokens)}};
}

}  // namespace hydragen::server
