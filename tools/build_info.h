// Version and source revision of this binary, for --version and benchmark JSON.
#pragma once

#include <string>

namespace hydragen::cli {

const char* version();
// The git commit the binary was built from: HYDRAGEN_GIT_COMMIT when CMake passes it,
// else `git rev-parse HEAD` of the current directory, else "unknown".
std::string git_commit();
// Current UTC time as ISO 8601, e.g. "2025-01-31T12:00:00Z".
std::string utc_now_iso();

}  // namespace hydragen::cli
