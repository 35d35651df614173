// Model presets: the config.json files under presets/ in the repository, by name.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace hydragen {

// The directory holding the presets: $HYDRAGEN_PRESET_DIR if set, else the source tree's.
std::filesystem::path preset_dir();
// Names of the shipped presets, sorted ("codellama-13b", ..., "tiny").
std::vector<std::string> preset_names();
// The preset's config; an unknown name is an Error listing the known ones.
ModelConfig load_preset(const std::string& name);

}  // namespace hydragen
