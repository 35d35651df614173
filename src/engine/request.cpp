#include "engine/request.h"

#include "hydragen/error.h"

namespace hydragen::engine {

namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string request_error(const GenerationRequest& request, const ModelConfig& config, std::int64_t pool_pages,
                          int page_size, std::int64_t shared_tokens, bool detokenize) {
  try {
    HG_CHECK(!request.prompt.empty(), "the prompt is empty");
    for (std::size_t i = 0; i < request.prompt.size(); ++i)
      HG_CHECK(request.prompt[i] >= 0 && request.prompt[i] < config.vocab_size, "prompt token ", i, " (",
               request.prompt[i], ") is outside the vocabulary [0, ", config.vocab_size, ")");
    HG_CHECK(request.n >= 1 && request.n <= 1 << 20, "n must be in [1, 1048576], got ", request.n);
    HG_CHECK(request.max_new_tokens >= 1, "max_new_tokens must be >= 1, got ", request.max_new_tokens);
    sample::validate(request.sampling);
    HG_CHECK(request.stop_strings.empty() || detokenize, "stop strings need a tokenizer");
    HG_CHECK(request.forced_tokens.empty() || (request.n == 1 && request.max_new_tokens ==
                                                                      static_cast<std::int64_t>(request.forced_tokens.size())),
             "forced tokens need n = 1 and max_new_tokens = their count (", request.forced_tokens.size(), "), got n = ",
             request.n, " and max_new_tokens = ", request.max_new_tokens);
    for (std::size_t i = 0; i < request.forced_tokens.size(); ++i)
      HG_CHECK(request.forced_tokens[i] >= 0 && request.forced_tokens[i] < config.vocab_size, "forced token ", i, " (",
               request.forced_tokens[i], ") is outside the vocabulary [0, ", config.vocab_size, ")");
    for (std::int64_t end : request.segment_ends)
      HG_CHECK(end > 0 && end <= static_cast<std::int64_t>(request.prompt.size()), "segment end ", end,
               " is outside the prompt's ", request.prompt.size(), " tokens");
    const auto prompt = static_cast<std::int64_t>(request.prompt.size());
    HG_CHECK(config.max_position_embeddings <= 0 || prompt + request.max_new_tokens <= config.max_position_embeddings,
             "the prompt (", prompt, " tokens) and max_new_tokens (", request.max_new_tokens,
             ") pass the model's context of ", config.max_position_embeddings, " positions");
    // At its longest: the tree part stored once, its own part (unshared prompt + every token).
    const std::int64_t own = prompt - 1 - shared_tokens + request.max_new_tokens;
    const std::int64_t pages = ceil_div(prompt - 1, page_size) + ceil_div(own, page_size);
    HG_CHECK(pages <= pool_pages, "the prompt (", prompt, " tokens) and max_new_tokens (", request.max_new_tokens,
             ") need ", pages, " KV pages, the pool has ", pool_pages);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

}  // namespace hydragen::engine
