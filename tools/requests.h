// Requests of `hydragen generate`: from the command line's flags or a JSONL file whose lines
// each name a prompt ("prompt" text, "prompt_ids", or "segments" / "segment_ids": pieces whose
// boundaries pin the sharing tree) and optional "n", "max_new_tokens", "temperature", "top_p",
// "top_k", "min_p", "seed", "stop", "stop_token_ids", "presence_penalty", "frequency_penalty",
// "repetition_penalty". A bad line becomes an error of its own.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace hydragen::cli {

struct ParsedRequest {
  engine::GenerationRequest request;
  std::string error;  // non-empty: the line was malformed; the request fails alone
};

// `defaults` carries the command line's sampling flags; a line's fields override them.
// tokenizer may be null (then text prompts are an error of that line).
std::vector<ParsedRequest> read_requests_jsonl(const std::string& path, const engine::GenerationRequest& defaults,
                                               const Tokenizer* tokenizer);
ParsedRequest parse_request_line(const std::string& line, const engine::GenerationRequest& defaults,
                                 const Tokenizer* tokenizer);

}  // namespace hydragen::cli
