// The `hydragen` executable. Each subcommand lives in its own file and registers itself here.
// Exit statuses (cli_parse.h): 0 done, 1 an error stopped the run ("error: ..."), 2 a wrong
// command line, 3 some requests failed.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#ifndef HYDRAGEN_NO_BENCH
#include "bench_attention.h"
#include "bench_serve.h"
#endif
#include "build_info.h"
#include "cli_parse.h"
#include "generate.h"
#include "hydragen/error.h"
#include "serve.h"

namespace {

// The subcommand words of argv must name subcommands: an unknown one (or none where one is
// needed) is named with the list of those there are, where CLI11 would say only that a
// subcommand is required.
void check_subcommand_words(CLI::App& app, int argc, char** argv) {
  CLI::App* level = &app;
  std::string path = "hydragen";
  for (int i = 1;; ++i) {
    const std::vector<CLI::App*> subcommands = level->get_subcommands([](CLI::App*) { return true; });
    if (subcommands.empty()) return;
    std::string names;
    for (const CLI::App* sub : subcommands) names += (names.empty() ? "" : ", ") + sub->get_name();
    if (i >= argc || argv[i][0] == '-') {
      if (i < argc && (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0 ||
                       std::strcmp(argv[i], "--version") == 0))
        return;
      hydragen::cli::usage_error(path, " needs a subcommand: ", names, " (", path, " --help says more)");
    }
    CLI::App* next = nullptr;
    for (CLI::App* sub : subcommands)
      if (sub->check_name(argv[i])) next = sub;
    if (next == nullptr)
      hydragen::cli::usage_error(path, ": unknown subcommand '", argv[i], "'; the subcommands are: ", names);
    level = next;
    path += std::string(" ") + argv[i];
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hydragen::cli;
  CLI::App app{
      "hydragen: an inference engine built around exact shared-prefix attention (Hydragen).\n"
      "Sequences that share a prefix attend it once, together, as a matrix-matrix product.\n"
      "Exit status: 0 done, 1 an error stopped the run, 2 a wrong command line, 3 some requests failed."};
  app.name("hydragen");
  app.set_version_flag("--version", std::string("hydragen ") + version() + " (commit " + git_commit() + ")");
  app.require_subcommand(1);

#ifndef HYDRAGEN_NO_BENCH  // configured with -DHYDRAGEN_BUILD_BENCH=OFF
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: each prints a table and writes JSON");
  bench->require_subcommand(1);
  hydragen::bench::register_bench_attention(*bench);
  hydragen::bench::register_bench_e2e(*bench);
  hydragen::bench::register_bench_host(*bench);
  hydragen::bench::register_bench_serve(*bench);
#endif
  int status = kExitOk;
  register_generate(app, status);
  register_serve(app);

  try {
    check_subcommand_words(app, argc, argv);
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitUsage;
  } catch (const hydragen::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitError;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory (try a smaller batch, --kv-memory or --memory-budget-gb)\n");
    return kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", hydragen::utf8_lossy(e.what()).c_str());
    return kExitError;
  }
  return status;
}
