// libFuzzer target: one line of `hydragen generate --requests` (client input). Parsing must
// either give a request or an error message for that line; nothing else may escape (an
// uncaught exception, a float-to-int overflow UBSan sees, a crash), and a request that
// parsed cleanly must pass the sampling checks or fail them with hydragen::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/engine.h"
#include "hydragen/error.h"
#include "requests.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  const hydragen::engine::GenerationRequest defaults;
  const hydragen::cli::ParsedRequest parsed = hydragen::cli::parse_request_line(line, defaults, nullptr);
  if (!parsed.error.empty()) return 0;
  if (parsed.request.prompt.empty() && parsed.request.segment_ends.empty()) {
    // "prompt_ids": [] parses; the engine rejects it at submission. Nothing else may be empty.
  }
  for (std::size_t i = 0; i < parsed.request.segment_ends.size(); ++i)
    if (parsed.request.segment_ends[i] > static_cast<std::int64_t>(parsed.request.prompt.size())) std::abort();
  try {
    hydragen::sample::validate(parsed.request.sampling);
  } catch (const hydragen::Error&) {
  }
  return 0;
}
