#include "model/presets.h"

#include <algorithm>
#include <cstdlib>

#include "hydragen/error.h"

namespace hydragen {

std::filesystem::path preset_dir() {
  if (const char* dir = std::getenv("HYDRAGEN_PRESET_DIR"); dir != nullptr && *dir != '\0') return dir;
  // This file is src/model/presets.cpp; the presets live at the repository root.
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path() / "presets";
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(preset_dir(), error)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

ModelConfig load_preset(const std::string& name) {
  const std::vector<std::string> names = preset_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    fail("unknown preset \"", name, "\"; known presets (in ", preset_dir().string(), "): ",
         known.empty() ? "none found, set HYDRAGEN_PRESET_DIR" : known);
  }
  return load_model_config(preset_dir() / (name + ".json"));
}

}  // namespace hydragen
