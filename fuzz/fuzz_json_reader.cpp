// libFuzzer target: arbitrary bytes through the one reader of outside JSON (core/json_reader.h)
// under small limits, and through the UTF-8 helpers every message uses. parse_json must throw
// hydragen::Error (valid UTF-8, a line long) or return a value nlohmann also accepts, no
// deeper than the limit; utf8_lossy and utf8_excerpt must give valid UTF-8, the lossy copy of
// valid text being the text itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "core/json_reader.h"
#include "core/utf8.h"
#include "hydragen/error.h"

namespace {

constexpr int kDepth = 16;

int depth_of(const nlohmann::json& value) {
  if (!value.is_structured()) return 0;
  int deepest = 0;
  for (const nlohmann::json& item : value) deepest = std::max(deepest, depth_of(item));
  return deepest + 1;
}

void check_valid(const std::string& text) {
  if (hydragen::utf8_invalid_at(text) != std::string::npos) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string lossy = hydragen::utf8_lossy(text);
  check_valid(lossy);
  if (hydragen::utf8_invalid_at(text) == std::string::npos && lossy != text) std::abort();
  const std::string excerpt = hydragen::utf8_excerpt(text, 40);
  check_valid(excerpt);
  if (size <= 40 ? excerpt != lossy : excerpt.size() > 40 + 3) std::abort();
  try {
    const nlohmann::json value = hydragen::parse_json(text, "fuzz-input", {1 << 16, kDepth});
    if (!nlohmann::json::accept(text) || depth_of(value) > kDepth) std::abort();
    check_valid(hydragen::json_excerpt(value));
  } catch (const hydragen::Error& e) {
    const std::string message = e.what();
    check_valid(message);
    if (message.size() > 400) std::abort();
  }
  return 0;
}
