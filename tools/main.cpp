// The `hydragen` executable. Each subcommand lives in its own file and registers itself
// here; a hydragen::Error anywhere becomes "error: ..." and exit status 1.
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#ifndef HYDRAGEN_NO_BENCH
#include "bench_attention.h"
#endif
#include "build_info.h"
#include "generate.h"
#include "hydragen/error.h"

int main(int argc, char** argv) {
  CLI::App app{
      "hydragen: an inference engine built around exact shared-prefix attention (Hydragen).\n"
      "Sequences that share a prefix attend it once, together, as a matrix-matrix product."};
  app.name("hydragen");
  app.set_version_flag("--version", std::string("hydragen ") + hydragen::cli::version() +
                                        " (commit " + hydragen::cli::git_commit() + ")");
  app.require_subcommand(1);

#ifndef HYDRAGEN_NO_BENCH  // configured with -DHYDRAGEN_BUILD_BENCH=OFF
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks: each prints a table and writes JSON");
  bench->require_subcommand(1);
  hydragen::bench::register_bench_attention(*bench);
  hydragen::bench::register_bench_e2e(*bench);
  hydragen::bench::register_bench_host(*bench);
#endif
  hydragen::cli::register_generate(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const hydragen::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory (try a smaller batch or --memory-budget-gb)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
