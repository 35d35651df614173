// `hydragen generate`: the engine from the command line. Prompts from -p, -f, --prompt-ids or
// a JSONL file of requests; --samples completions each; the radix tree shares every common
// prefix. Text streams to stdout for a single sequence; --output writes one JSON line per
// completion; a progress bar (on a terminal) and a closing summary go to stderr.
#pragma once

#include <cstdio>

#include <CLI/CLI.hpp>

#include "generate_flags.h"
#include "generate_report.h"

namespace hydragen::cli {

// Runs the generation. Bad options are a UsageError (or an Error where a file or the model is
// at fault); a malformed request fails alone (its completion carries the error) and is
// counted and named in the summary. Text of a single sequence streams to `out`.
GenerateSummary run_generate(const GenerateOptions& options, std::FILE* out, std::FILE* log);

// Registers `generate` on `app`; after a run, exit_status is kExitOk when every request
// completed and kExitRequestsFailed when any failed.
void register_generate(CLI::App& app, int& exit_status);

}  // namespace hydragen::cli
