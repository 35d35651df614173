// The --device of `generate` and `bench e2e`: "auto" (the default) is cuda when this build has
// the CUDA backend and a device is present, else cpu; "cuda" without one is a clear error.
#pragma once

#include <string>

namespace hydragen::cli {

inline constexpr const char* kDeviceHelp =
    "auto (cuda when a CUDA device is present, else cpu), cpu (fp32) or cuda (bf16)";

// "cpu" or "cuda" for the flag's value; an unknown value is a UsageError, "cuda" in a build
// without CUDA or on a machine without a device an Error saying so.
std::string pick_device(const std::string& flag_value);

}  // namespace hydragen::cli
