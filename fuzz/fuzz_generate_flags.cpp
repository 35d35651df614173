// libFuzzer target: `hydragen generate`'s command line, the input's NUL-separated pieces as
// its arguments, parsed by the flags the binary registers (numbers through cli_parse, never an
// unchecked cast), then checked alone and against a model. A bad command line must end in
// CLI::ParseError or hydragen::cli::UsageError; anything else escaping, or a UBSan report (a
// float-to-int overflow), is a finding. The bench flags' list parsers get every piece too.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_parse.h"
#include "generate_flags.h"
#include "model/model_config.h"

namespace {

std::FILE* null_log() {
  static std::FILE* log = std::fopen("/dev/null", "w");
  return log;
}

hydragen::ModelConfig tiny_model() {
  hydragen::ModelConfig c;
  c.vocab_size = 512, c.max_position_embeddings = 4096;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"hydragen", "generate"};
  std::string piece;
  for (std::size_t i = 0; i < size && args.size() < 40; ++i) {
    if (data[i] == 0) args.push_back(piece), piece.clear();
    else piece.push_back(static_cast<char>(data[i]));
  }
  args.push_back(piece);
  for (const std::string& arg : args) {
    try {
      hydragen::cli::parse_count_list(arg, "--batch");
    } catch (const hydragen::cli::UsageError&) {
    }
    try {
      hydragen::cli::parse_two_level(arg, "--two-level");
    } catch (const hydragen::cli::UsageError&) {
    }
  }
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  CLI::App app{"fuzz"};
  CLI::App* generate = app.add_subcommand("generate");
  hydragen::cli::GenerateOptions options;
  hydragen::cli::add_generate_flags(*generate, options);
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    hydragen::cli::check_generate_flags(options, null_log());
    hydragen::cli::check_against_model(options, tiny_model());
  } catch (const CLI::ParseError&) {
  } catch (const hydragen::cli::UsageError&) {
  }
  return 0;
}
