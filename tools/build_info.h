// Version and source revision of this binary, for --version and benchmark JSON.
#pragma once

#include <string>

namespace hydragen::cli {

const char* version();
// The git commit the binary was built from ("-dirty" when tracked files differed), written
// into build_commit.h at every build; without that header, `git rev-parse HEAD` of the
// current directory, else "unknown".
std::string git_commit();
// Current UTC time as ISO 8601, e.g. "2025-01-31T12:00:00Z".
std::string utc_now_iso();

}  // namespace hydragen::cli
