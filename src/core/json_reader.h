// The one reader of JSON from outside: request lines, config.json, tokenizer.json,
// tokenizer_config.json, generation_config.json, safetensors indexes, a server's bodies. Text
// past a size limit, nesting past a depth limit (what recursive consumers of the value could
// not survive), invalid UTF-8 and malformed JSON are each a hydragen::Error that names the
// source and the byte offset; nothing else escapes, whatever the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hydragen {

struct JsonLimits {
  std::uint64_t max_bytes = std::uint64_t{64} << 20;
  int max_depth = 64;  // arrays and objects inside each other; real files need under 10
};

// Parses `text` (one value, whitespace around it); errors start with `source` ("config.json")
// unless it is empty.
nlohmann::json parse_json(std::string_view text, const std::string& source, const JsonLimits& limits = {});

// The JSON of a regular file (core/regular_file.h), its size checked before it is read.
nlohmann::json read_json_file(const std::filesystem::path& path, const JsonLimits& limits = {});

// A value for a message: its JSON text, cut to about max_bytes ("..." marks the cut).
std::string json_excerpt(const nlohmann::json& value, std::size_t max_bytes = 80);

}  // namespace hydragen
