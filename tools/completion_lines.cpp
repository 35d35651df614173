#include "completion_lines.h"

#include <nlohmann/json.hpp>

#include "core/utf8.h"

namespace hydragen::cli {

namespace {

// Every string is made valid UTF-8 before it goes in (utf8_lossy); the handler only backs that up.
std::string dump(const nlohmann::json& line) {
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string error_line(std::size_t request, const std::string& error) {
  return dump({{"request", request}, {"sample", 0}, {"finish_reason", "error"}, {"error", utf8_lossy(error)}});
}

std::string completion_line(const engine::Completion& c, std::size_t request, std::size_t prompt_tokens,
                            const std::string* text) {
  nlohmann::json line{{"request", request},     {"sample", c.sample},     {"prompt_tokens", prompt_tokens},
                      {"tokens", c.tokens},       {"logprobs", c.logprobs}, {"finish_reason", c.finish_reason}};
  if (text != nullptr) line["text"] = utf8_lossy(*text);
  if (!c.error.empty()) line["error"] = utf8_lossy(c.error);
  return dump(line);
}

}  // namespace hydragen::cli
