// `hydragen serve`: an OpenAI-compatible HTTP server over a long-lived engine (src/server).
#pragma once

#include <CLI/CLI.hpp>

namespace hydragen::cli {

void register_serve(CLI::App& app);

}  // namespace hydragen::cli
