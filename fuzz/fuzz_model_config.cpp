// libFuzzer target: arbitrary bytes as a config.json (a file of the user's checkpoint), through
// the bounded JSON reader and parse_model_config. Each must throw hydragen::Error or give a
// config the engine can size itself from: positive sizes, heads a multiple of kv heads, and
// the products it forms (parameter count, per-token K/V bytes) without overflow (UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/json_reader.h"
#include "hydragen/error.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const nlohmann::json config =
        hydragen::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz-input");
    const hydragen::ModelConfig c = hydragen::parse_model_config(config, "fuzz-input");
    if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 ||
        c.head_dim <= 0 || c.num_heads % c.num_kv_heads != 0 || c.max_position_embeddings <= 0 ||
        !(c.rms_norm_eps > 0))
      std::abort();
    volatile std::int64_t sink = c.parameter_count() + 2 * c.num_layers * c.kv_size() * 2;
    (void)sink;
  } catch (const hydragen::Error&) {
  }
  return 0;
}
