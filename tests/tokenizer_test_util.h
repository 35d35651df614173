// Shared by the tokenizer test files: where the fixtures are, and reading them.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace hydragen::test {

inline std::filesystem::path tokenizer_fixtures() {
  return std::filesystem::path(HYDRAGEN_TEST_FIXTURES) / "tokenizer";
}

inline nlohmann::json read_json_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return nlohmann::json::parse(in);
}

}  // namespace hydragen::test
