// `hydragen bench serve`: the server under load through loopback HTTP, as vLLM's serving
// benchmark measures one: closed loop (N concurrent clients) or Poisson arrivals, a shared
// system prompt or unique prompts; throughput, time to first token, inter-token latency and
// request latency (p50/p99) as a table and JSON.
#pragma once

#include <CLI/CLI.hpp>

namespace hydragen::bench {

void register_bench_serve(CLI::App& bench);

}  // namespace hydragen::bench
