// Requests of `hydragen generate` from a JSONL file (or standard input) whose lines each name a
// prompt ("prompt": text or token ids, "prompt_ids", or "segments" / "segment_ids": pieces
// whose boundaries pin the sharing tree) and optional fields, with OpenAI's names where they
// mean the same: "n" (samples), "max_tokens" or "max_new_tokens", "temperature", "top_p",
// "top_k", "min_p", "seed", "stop" (a string or a list), "stop_token_ids", "presence_penalty",
// "frequency_penalty", "repetition_penalty". A bad line becomes an error of its own; a line
// longer than kMaxRequestLineBytes is one, and is never held whole.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace hydragen::cli {

inline constexpr std::uint64_t kMaxRequestLineBytes = std::uint64_t{64} << 20;

struct ParsedRequest {
  engine::GenerationRequest request;
  std::string error;     // non-empty: the line was malformed; the request fails alone
  std::int64_t line = 0;  // its line in the file (1-based); 0 for a request from the flags
};

// `path` "-" reads standard input. `defaults` carries the command line's flags; a line's fields
// override them. tokenizer may be null (then text prompts are an error of that line). A path
// that is not a regular file (a directory, a FIFO, /dev/zero) is an Error naming it.
std::vector<ParsedRequest> read_requests_jsonl(const std::string& path, const engine::GenerationRequest& defaults,
                                               const Tokenizer* tokenizer);
// The first sampling value outside the sampler's ranges (sample::validate), as "NAME must be
// ..., got V" with NAME as the user wrote it (--top-p as_flags, else "top_p"); "" when all fit.
std::string sampling_range_error(const sample::SamplingParams& params, bool as_flags);

ParsedRequest parse_request_line(const std::string& line, const engine::GenerationRequest& defaults,
                                 const Tokenizer* tokenizer);

}  // namespace hydragen::cli
