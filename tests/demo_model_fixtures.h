// Where the demo model (models/demo, made by scripts/train-demo-model.py) and its reference
// fixtures (tests/fixtures/demo) live, from HYDRAGEN_TEST_FIXTURES (the source tree's
// tests/fixtures, set by CMake).
#pragma once

#include <filesystem>

namespace hydragen::test {

inline std::filesystem::path demo_fixture_dir() { return std::filesystem::path(HYDRAGEN_TEST_FIXTURES) / "demo"; }

inline std::filesystem::path demo_model_dir() {
  return std::filesystem::path(HYDRAGEN_TEST_FIXTURES).parent_path().parent_path() / "models" / "demo";
}

}  // namespace hydragen::test
