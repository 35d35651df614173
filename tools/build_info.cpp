#include "build_info.h"

#include <array>
#include <cstdio>
#include <ctime>

#ifdef HYDRAGEN_HAS_COMMIT_HEADER
#include "build_commit.h"
#endif

namespace hydragen::cli {

const char* version() {
#ifdef HYDRAGEN_VERSION
  return HYDRAGEN_VERSION;
#else
  return "0.1.0";
#endif
}

std::string git_commit() {
#ifdef HYDRAGEN_GIT_COMMIT
  if (std::string(HYDRAGEN_GIT_COMMIT).size() > 0) return HYDRAGEN_GIT_COMMIT;
#endif
  std::string commit;
  if (FILE* pipe = popen("git rev-parse HEAD 2>/dev/null", "r")) {
    std::array<char, 128> buffer{};
    while (fgets(buffer.data(), buffer.size(), pipe) != nullptr) commit += buffer.data();
    pclose(pipe);
  }
  while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r')) commit.pop_back();
  // Outside a repository (or in one without commits) git prints "HEAD" or nothing.
  const bool is_hash = commit.size() == 40 && commit.find_first_not_of("0123456789abcdef") == std::string::npos;
  return is_hash ? commit : "unknown";
}

std::string utc_now_iso() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::array<char, 32> text{};
  std::strftime(text.data(), text.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text.data();
}

}  // namespace hydragen::cli
