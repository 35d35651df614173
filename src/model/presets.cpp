#include "model/presets.h"

#include <algorithm>
#include <cstdlib>

#include "hydragen/error.h"

namespace hydragen {

std::vector<std::filesystem::path> preset_dir_candidates(const std::filesystem::path& executable) {
  const std::filesystem::path bin = executable.parent_path();
  // HYDRAGEN_SOURCE_DIR: the repository root this library was built from (set by CMake).
  const std::filesystem::path source = HYDRAGEN_SOURCE_DIR;
  return {bin / "presets", bin.parent_path() / "presets", bin.parent_path().parent_path() / "presets",
          bin.parent_path() / "share" / "hydragen" / "presets", source / "presets"};
}

std::filesystem::path preset_dir() {
  if (const char* dir = std::getenv("HYDRAGEN_PRESET_DIR"); dir != nullptr && *dir != '\0') return dir;
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  const std::vector<std::filesystem::path> candidates = preset_dir_candidates(error ? std::filesystem::path{} : self);
  for (const std::filesystem::path& dir : candidates)
    if (std::filesystem::is_regular_file(dir / "tiny.json", error)) return dir;
  return candidates.back();
}

namespace {

// The .json files' stems in `dir`, sorted.
std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::vector<std::string> preset_names() { return names_in(preset_dir()); }

ModelConfig load_preset(const std::string& name) {
  const std::filesystem::path dir = preset_dir();  // (a search of the file system: once)
  const std::vector<std::string> names = names_in(dir);
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    fail("unknown preset \"", name, "\"; known presets (in ", dir.string(), "): ",
         known.empty() ? "none found, set HYDRAGEN_PRESET_DIR" : known);
  }
  return load_model_config(dir / (name + ".json"));
}

}  // namespace hydragen
