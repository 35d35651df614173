// The lines `generate --output` writes: one JSON object per completion, and one per malformed
// request line. Each is valid JSON in valid UTF-8 whatever its text or error holds (invalid
// bytes become U+FFFD), so one odd request never stops the file being written.
#pragma once

#include <cstddef>
#include <string>

#include "engine/engine.h"

namespace hydragen::cli {

// {"error", "finish_reason": "error", "request", "sample": 0}
std::string error_line(std::size_t request, const std::string& error);
// {"finish_reason", "logprobs", "prompt_tokens", "request", "sample", "text" (when given),
//  "tokens", "error" (when it failed)}
std::string completion_line(const engine::Completion& completion, std::size_t request, std::size_t prompt_tokens,
                            const std::string* text);

}  // namespace hydragen::cli
