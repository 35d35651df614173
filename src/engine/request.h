// What goes into the engine and what comes out: a request (a prompt, n samples, sampling and
// stop rules), the events it streams (one per sampled token) and its completions.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "sample/sampling.h"

namespace hydragen::engine {

using RequestId = std::int64_t;  // handed out by Engine::submit, 0, 1, 2, ... in submission order

struct GenerationRequest {
  std::vector<std::int32_t> prompt;  // >= 1 token
  int n = 1;                         // samples; sample i uses seed sampling.seed + i
  sample::SamplingParams sampling;
  std::int64_t max_new_tokens = 128;
  std::vector<std::int32_t> stop_token_ids;
  std::vector<std::string> stop_strings;  // needs EngineOptions::detokenize
  // An explicit sharing spec: prompt token counts where the tree must have a segment
  // boundary (e.g. after a system prompt, after a document), besides the automatic ones.
  std::vector<std::int64_t> segment_ends;
  // Read at most this many prompt tokens from the shared tree (-1: all); the rest of the
  // prompt is copied into the sequence's own pages: sharing limited to a root prefix, as
  // the paper's one-level baseline of its two-level experiment.
  std::int64_t max_shared_tokens = -1;
  // Scoring: token i of the completion is forced_tokens[i] instead of a draw, its logprob the
  // model's (the log-probability of this continuation given the prompt); when given, n = 1
  // and max_new_tokens = its size. Stop tokens and strings still end it early.
  std::vector<std::int32_t> forced_tokens;
};

// One sampled token, as it reaches the host. Tokens collected from one step share a time.
struct TokenEvent {
  RequestId request = 0;
  int sample = 0;
  std::int32_t token = 0;
  float logprob = 0;       // log-probability under the model
  std::int64_t index = 0;  // the token's place in its completion (0: the first)
  std::chrono::steady_clock::time_point time;
  // The top-N (N = sampling.logprobs, at most the vocab), most likely first; empty when N = 0.
  std::vector<sample::TokenLogprob> top_logprobs;
};

struct Completion {
  RequestId request = 0;
  int sample = 0;
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;  // log-probability of each token under the model
  // Per token, its top-N (as TokenEvent::top_logprobs); empty when sampling.logprobs = 0.
  std::vector<std::vector<sample::TokenLogprob>> top_logprobs;
  // "stop" (a stop token or string), "length", "cancelled" (Engine::cancel) or "error".
  std::string finish_reason;
  std::string error;          // why a malformed request failed (it fails alone)
  bool kv_pool_full = false;  // failed only because the KV pool can never hold it at once
};

// Why `request` cannot run on a model of `config` with a pool of `pool_pages` pages of
// `page_size` tokens (its tree part stored once, its own part up to max_new_tokens), or "";
// `shared_tokens` prompt tokens are read from the tree. detokenize: whether stop strings can work.
std::string request_error(const GenerationRequest& request, const ModelConfig& config, std::int64_t pool_pages,
                          int page_size, std::int64_t shared_tokens, bool detokenize);

}  // namespace hydragen::engine
