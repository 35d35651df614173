// Model presets: the config.json files under presets/ in the repository, by name.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace hydragen {

// The directory holding the presets: $HYDRAGEN_PRESET_DIR if set, else the first of
// preset_dir_candidates(this executable) that exists.
std::filesystem::path preset_dir();
// Where a binary at `executable` looks for presets, in order: presets/ next to it, one and
// two levels up (a build folder in the tree, a bundle's build/ from scripts/bundle-build),
// share/hydragen/presets of an install prefix, then the source tree it was built from.
std::vector<std::filesystem::path> preset_dir_candidates(const std::filesystem::path& executable);
// Names of the shipped presets, sorted ("codellama-13b", ..., "tiny").
std::vector<std::string> preset_names();
// The preset's config; an unknown name is an Error listing the known ones.
ModelConfig load_preset(const std::string& name);

}  // namespace hydragen
