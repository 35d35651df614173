// The one attention-mode enum's names: the CLI flags, JSON fields and messages all use them.
#include "hydragen/attention.h"
#include "hydragen/error.h"

namespace hydragen {

namespace {
constexpr AttentionMode kModes[] = {AttentionMode::hydragen, AttentionMode::paged, AttentionMode::dense,
                                    AttentionMode::none};
}  // namespace

const char* mode_name(AttentionMode mode) {
  switch (mode) {
    case AttentionMode::hydragen: return "hydragen";
    case AttentionMode::paged: return "paged";
    case AttentionMode::dense: return "dense";
    case AttentionMode::none: return "none";
  }
  return "unknown";
}

AttentionMode parse_mode(const std::string& name) {
  for (AttentionMode mode : kModes)
    if (name == mode_name(mode)) return mode;
  fail("unknown attention mode '", name, "', expected one of hydragen, paged, dense, none");
}

}  // namespace hydragen
