#include "bench_serve.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "bench_report.h"
#include "build_info.h"
#include "cli_parse.h"
#include "device_choice.h"
#include "model/presets.h"
#include "model_flags.h"
#include "server/server_stack.h"

namespace hydragen::bench {

namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct ServeBenchOptions : cli::ModelFlags {
  std::string modes = "hydragen,paged";
  std::string prompts = "shared,unique";  // a shared system prompt, or unique prompts
  std::string concurrency = "16";         // closed loop: clients at once (a list sweeps)
  double request_rate = 0;                // > 0: Poisson arrivals at this rate (per s), concurrency caps them
  std::int64_t requests = 64;
  std::int64_t system_tokens = 1024;      // the shared system prompt
  std::int64_t user_tokens = 32;          // each request's own part
  std::int64_t new_tokens = 64;
  std::int64_t long_prompt_tokens = 0;    // > 0: one prompt this long arrives halfway through
  std::int64_t max_step_tokens = 2048;
  std::uint64_t seed = 1;
  std::string json_path;
};

// What one client saw of one streamed request.
struct RequestTrace {
  bool ok = false;
  Clock::time_point sent;
  std::vector<Clock::time_point> tokens;  // when each token's chunk arrived
  std::int64_t token_count = 0;
};

RequestTrace stream_one(int port, const std::vector<std::int32_t>& prompt, std::int64_t new_tokens, std::uint64_t seed) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(600, 0);
  const json body = {{"prompt", prompt},       {"max_tokens", new_tokens}, {"temperature", 1.0}, {"seed", seed},
                     {"ignore_eos", true},     {"stream", true}};
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  RequestTrace trace;
  std::string pending;
  bool done = false;
  req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
    const auto now = Clock::now();
    pending.append(data, len);
    std::size_t end;
    while ((end = pending.find("\n\n")) != std::string::npos) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      if (event == "data: [DONE]") {
        done = true;
        continue;
      }
      const json chunk = json::parse(event.substr(6), nullptr, false);
      if (!chunk.is_object() || !chunk.contains("choices") || chunk["choices"].empty()) continue;
      const json& ids = chunk["choices"][0].value("token_ids", json::array());
      for (std::size_t i = 0; i < ids.size(); ++i) trace.tokens.push_back(now);
      trace.token_count += static_cast<std::int64_t>(ids.size());
    }
    return true;
  };
  trace.sent = Clock::now();
  const auto res = client.send(req);
  trace.ok = res && res->status == 200 && done;
  return trace;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = p / 100 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(at);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

std::vector<std::int32_t> random_ids(std::mt19937_64& rng, std::int64_t count, std::int64_t vocab) {
  std::uniform_int_distribution<std::int32_t> token(3, static_cast<std::int32_t>(std::min<std::int64_t>(vocab, 1 << 30) - 1));
  std::vector<std::int32_t> out(static_cast<std::size_t>(count));
  for (auto& t : out) t = token(rng);
  return out;
}

json stats_ms(const std::vector<double>& seconds) {
  return {{"p50_ms", percentile(seconds, 50) * 1e3}, {"p99_ms", percentile(seconds, 99) * 1e3},
          {"mean_ms", seconds.empty() ? 0.0 : 1e3 * std::accumulate(seconds.begin(), seconds.end(), 0.0) /
                                                  static_cast<double>(seconds.size())}};
}

// One point: a fresh server over `runner`, the requests through it, the figures.
json run_point(engine::ModelRunner& runner, const ServeBenchOptions& o, const std::string& mode, bool shared,
               std::int64_t concurrency) {
  server::StackOptions stack;
  stack.http.port = 0;
  stack.limits.max_running = std::min<std::int64_t>(o.max_batch, std::max<std::int64_t>(concurrency, 1) + 1);
  stack.limits.max_queue = o.requests + 2;
  stack.engine.attention = parse_mode(mode);
  stack.engine.max_step_tokens = o.max_step_tokens;
  server::ServerStack server(runner, nullptr, std::nullopt, stack);
  const int port = server.start();

  std::mt19937_64 rng(o.seed);
  const std::int64_t vocab = runner.config().vocab_size;
  const std::vector<std::int32_t> system = random_ids(rng, o.system_tokens, vocab);
  std::vector<std::vector<std::int32_t>> prompts;
  for (std::int64_t i = 0; i < o.requests; ++i) {
    std::vector<std::int32_t> p = shared ? system : random_ids(rng, o.system_tokens, vocab);
    const auto own = random_ids(rng, o.user_tokens, vocab);
    p.insert(p.end(), own.begin(), own.end());
    prompts.push_back(std::move(p));
  }
  std::vector<RequestTrace> traces(prompts.size());
  std::atomic<std::int64_t> next{0};
  RequestTrace long_trace;
  std::thread long_client;
  std::atomic<bool> long_started{false};
  auto maybe_long = [&](std::int64_t index) {
    if (o.long_prompt_tokens <= 0 || index != o.requests / 2 || long_started.exchange(true)) return;
    std::vector<std::int32_t> p = random_ids(rng, o.long_prompt_tokens, vocab);
    long_client = std::thread([&, p = std::move(p)] { long_trace = stream_one(port, p, 1, o.seed); });
  };
  std::mutex rng_mutex;
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  if (o.request_rate <= 0) {  // closed loop: each client sends its next request when one ends
    for (std::int64_t c = 0; c < concurrency; ++c)
      clients.emplace_back([&] {
        for (std::int64_t i; (i = next++) < o.requests;) {
          {
            std::lock_guard lock(rng_mutex);
            maybe_long(i);
          }
          traces[static_cast<std::size_t>(i)] = stream_one(port, prompts[static_cast<std::size_t>(i)], o.new_tokens, o.seed + static_cast<std::uint64_t>(i));
        }
      });
  } else {  // Poisson arrivals, at most `concurrency` in flight
    std::exponential_distribution<double> gap(o.request_rate);
    std::atomic<std::int64_t> in_flight{0};
    for (std::int64_t i = 0; i < o.requests; ++i) {
      std::this_thread::sleep_for(std::chrono::duration<double>(gap(rng)));
      while (in_flight >= concurrency) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      maybe_long(i);
      ++in_flight;
      clients.emplace_back([&, i] {
        traces[static_cast<std::size_t>(i)] = stream_one(port, prompts[static_cast<std::size_t>(i)], o.new_tokens, o.seed + static_cast<std::uint64_t>(i));
        --in_flight;
      });
    }
  }
  for (auto& t : clients) t.join();
  if (long_client.joinable()) long_client.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  server.shutdown();

  std::vector<double> ttft, itl, latency, itl_during_long;
  std::int64_t tokens = 0, completed = 0;
  const bool has_long = o.long_prompt_tokens > 0 && long_trace.ok && !long_trace.tokens.empty();
  for (const RequestTrace& t : traces) {
    if (!t.ok || t.tokens.empty()) continue;
    ++completed;
    tokens += t.token_count;
    ttft.push_back(std::chrono::duration<double>(t.tokens.front() - t.sent).count());
    latency.push_back(std::chrono::duration<double>(t.tokens.back() - t.sent).count());
    for (std::size_t k = 1; k < t.tokens.size(); ++k) {
      const double gap = std::chrono::duration<double>(t.tokens[k] - t.tokens[k - 1]).count();
      itl.push_back(gap);
      if (has_long && t.tokens[k] >= long_trace.sent && t.tokens[k - 1] <= long_trace.tokens.back())
        itl_during_long.push_back(gap);
    }
  }
  json row = {{"mode", mode},
              {"prompts", shared ? "shared" : "unique"},
              {"concurrency", concurrency},
              {"request_rate", o.request_rate},
              {"requests", o.requests},
              {"completed", completed},
              {"wall_s", wall},
              {"output_tokens", tokens},
              {"throughput_tok_s", tokens / wall},
              {"request_throughput_s", static_cast<double>(completed) / wall},
              {"ttft", stats_ms(ttft)},
              {"itl", stats_ms(itl)},
              {"latency", stats_ms(latency)}};
  if (o.long_prompt_tokens > 0)
    row["long_prompt"] = {{"tokens", o.long_prompt_tokens},
                          {"ok", long_trace.ok},
                          {"ttft_ms", has_long ? 1e3 * std::chrono::duration<double>(long_trace.tokens.front() - long_trace.sent).count() : 0.0},
                          {"itl_while_it_arrives", stats_ms(itl_during_long)},
                          {"itl_samples", itl_during_long.size()}};
  return row;
}

void run_serve_bench(const ServeBenchOptions& o) {
  cli::check_model_flags(o);
  if (o.requests < 1) cli::usage_error("--requests: at least 1, got ", o.requests);
  if (o.system_tokens + o.user_tokens < 1) cli::usage_error("--system-tokens + --user-tokens must be at least 1");
  if (o.new_tokens < 1) cli::usage_error("--new-tokens: at least 1, got ", o.new_tokens);
  if (!(o.request_rate >= 0)) cli::usage_error("--request-rate: must be >= 0");
  const std::vector<std::int64_t> concurrencies = cli::parse_count_list(o.concurrency, "--concurrency");
  const std::vector<std::string> modes = cli::parse_word_list(o.modes, "--modes");
  const std::vector<std::string> kinds = cli::parse_word_list(o.prompts, "--prompts");
  for (const auto& k : kinds)
    if (k != "shared" && k != "unique") cli::usage_error("--prompts: expected shared and/or unique, got '", k, "'");
  for (const auto& m : modes) {
    try {
      parse_mode(m);
    } catch (const Error& e) {
      cli::usage_error("--modes: ", e.what());
    }
  }
  const std::string device = cli::pick_device(o.device);
  ModelConfig config = o.model_dir.empty() ? load_preset(o.random_preset) : load_model_config(o.model_dir);
  const std::int64_t longest = std::max(o.system_tokens + o.user_tokens, o.long_prompt_tokens) + o.new_tokens;
  if (config.max_position_embeddings > 0 && longest > config.max_position_embeddings) {
    if (!o.model_dir.empty())
      cli::usage_error("a request of ", longest, " tokens passes the model's context of ", config.max_position_embeddings);
    // Random weights know no context: widen it to the longest request, as bench e2e does.
    std::printf("note: %s's context widened from %lld to %lld positions (random weights)\n", o.random_preset.c_str(),
                static_cast<long long>(config.max_position_embeddings), static_cast<long long>(longest));
    config.max_position_embeddings = longest;
  }
  const auto runner = cli::make_model_runner(o, device, config, cli::runner_options_of(o));
  json rows = json::array();
  std::printf("%-9s %-7s %5s %9s %10s %9s %9s %9s %9s %10s\n", "mode", "prompts", "conc", "done", "tok/s", "ttft p50",
              "ttft p99", "itl p50", "itl p99", "lat p50");
  for (const std::string& kind : kinds)
    for (const std::int64_t c : concurrencies)
      for (const std::string& mode : modes) {
        const json row = run_point(*runner, o, mode, kind == "shared", c);
        std::printf("%-9s %-7s %5lld %4lld/%-4lld %10.1f %7.1fms %7.1fms %7.2fms %7.2fms %8.1fms\n", mode.c_str(),
                    kind.c_str(), static_cast<long long>(c), static_cast<long long>(row["completed"].get<std::int64_t>()),
                    static_cast<long long>(o.requests), row["throughput_tok_s"].get<double>(),
                    row["ttft"]["p50_ms"].get<double>(), row["ttft"]["p99_ms"].get<double>(),
                    row["itl"]["p50_ms"].get<double>(), row["itl"]["p99_ms"].get<double>(),
                    row["latency"]["p50_ms"].get<double>());
        if (row.contains("long_prompt"))
          std::printf("          long prompt of %lld tokens: ttft %.1f ms; itl while it arrives p50 %.2f ms, p99 %.2f ms\n",
                      static_cast<long long>(o.long_prompt_tokens), row["long_prompt"]["ttft_ms"].get<double>(),
                      row["long_prompt"]["itl_while_it_arrives"]["p50_ms"].get<double>(),
                      row["long_prompt"]["itl_while_it_arrives"]["p99_ms"].get<double>());
        std::fflush(stdout);
        rows.push_back(row);
        json report = {{"tool", "hydragen bench serve"}, {"version", cli::version()}, {"git_commit", cli::git_commit()},
                       {"device", runner->device_name()},
                       {"model", o.model_dir.empty() ? o.random_preset : o.model_dir},
                       {"settings", {{"requests", o.requests}, {"system_tokens", o.system_tokens},
                                     {"user_tokens", o.user_tokens}, {"new_tokens", o.new_tokens},
                                     {"request_rate", o.request_rate}, {"long_prompt_tokens", o.long_prompt_tokens},
                                     {"max_step_tokens", o.max_step_tokens}, {"page_size", o.page_size}}},
                       {"rows", rows}};
        if (!o.json_path.empty()) write_json_file(o.json_path, report);
      }
}

}  // namespace

void register_bench_serve(CLI::App& bench) {
  auto o = std::make_shared<ServeBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "serve", "The server through loopback HTTP: closed loop or Poisson arrivals, shared or unique prompts");
  cli::add_model_source_flags(*cmd, *o);
  cmd->add_option("--modes", o->modes, "Attention modes, one server each")->capture_default_str();
  cmd->add_option("--prompts", o->prompts, "shared (one system prompt) and/or unique")->capture_default_str();
  cmd->add_option("--concurrency", o->concurrency, "Clients at once (a list sweeps)")->capture_default_str();
  cmd->add_option("--request-rate", o->request_rate, "Poisson arrivals per second (0: closed loop)")->capture_default_str();
  cmd->add_option("--requests", o->requests, "Requests per point")->capture_default_str();
  cmd->add_option("--system-tokens", o->system_tokens, "Tokens of the system prompt")->capture_default_str();
  cmd->add_option("--user-tokens", o->user_tokens, "Tokens each request adds")->capture_default_str();
  cmd->add_option("--new-tokens", o->new_tokens, "Tokens each request generates")->capture_default_str();
  cmd->add_option("--long-prompt-tokens", o->long_prompt_tokens,
                  "One prompt this long arrives halfway through (ITL while it prefills in chunks)")->capture_default_str();
  cmd->add_option("--max-step-tokens", o->max_step_tokens, "Rows of one engine step")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of prompts and sampling")->capture_default_str();
  cmd->add_option("--json", o->json_path, "Write the results as JSON");
  cli::add_engine_flags(*cmd, *o, "KV pool size; default: 1 GiB (CPU), the free memory after the weights (CUDA)");
  cmd->callback([o] { run_serve_bench(*o); });
}

}  // namespace hydragen::bench
