// libFuzzer target: one line of `hydragen generate --requests` (client input), then the line
// `--output` writes for it. Parsing must give a request or an error for that line; nothing else
// may escape (an uncaught exception, a float-to-int overflow UBSan sees, a crash). The error
// line, and a completion line whose text is the input's raw bytes, must be valid UTF-8 JSON
// that reads back to what was written (invalid bytes as U+FFFD).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "completion_lines.h"
#include "core/utf8.h"
#include "engine/engine.h"
#include "hydragen/error.h"
#include "requests.h"

namespace {

nlohmann::json read_back(const std::string& line) {
  if (hydragen::utf8_invalid_at(line) != std::string::npos || line.find('\n') != std::string::npos) std::abort();
  return nlohmann::json::parse(line);  // throws (a finding) unless valid JSON
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  const hydragen::engine::GenerationRequest defaults;
  const hydragen::cli::ParsedRequest parsed = hydragen::cli::parse_request_line(line, defaults, nullptr);
  if (!parsed.error.empty()) {
    if (read_back(hydragen::cli::error_line(3, parsed.error))["error"] != parsed.error) std::abort();
  } else {
    for (std::size_t i = 0; i < parsed.request.segment_ends.size(); ++i)
      if (parsed.request.segment_ends[i] > static_cast<std::int64_t>(parsed.request.prompt.size())) std::abort();
    try {
      hydragen::sample::validate(parsed.request.sampling);  // the line's checks are the sampler's
    } catch (const hydragen::Error&) {
      std::abort();
    }
  }
  hydragen::engine::Completion completion;
  completion.tokens = parsed.request.prompt;
  completion.logprobs.assign(completion.tokens.size(), -1.5f);
  completion.finish_reason = "length";
  if (read_back(hydragen::cli::completion_line(completion, 0, 1, &line))["text"] != hydragen::utf8_lossy(line))
    std::abort();
  return 0;
}
