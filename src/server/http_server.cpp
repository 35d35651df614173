#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <random>
#include <thread>

#include "server/api_error.h"
#include "server/client_socket.h"
#include "server/openai_response.h"

namespace hydragen::server {

namespace {

using nlohmann::json;
using namespace std::chrono_literals;

constexpr auto kPoll = 50ms;  // how often a waiting handler looks at its client's socket

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status();
  if (e.status() == 503) res.set_header("Retry-After", "1");
  res.set_content(dump(e.body()), "application/json");
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One generation request's state while its events arrive: the choices, the ids of the response.
struct Generation {
  OpenAiRequest request;
  std::shared_ptr<Job> job;
  std::vector<ChoiceState> choices;
  std::vector<bool> started;
  std::string id, model;
  std::int64_t created = 0, prompt_tokens = 0;
  int fd = -1;
  bool finished = false;  // every event taken
  bool pool_full = false;
  std::string error;       // the first error of a choice
  bool cancelled = false;  // a choice was cancelled (the server stopping)

  ChoiceState& choice_of(int prompt, int sample) {
    return choices[static_cast<std::size_t>(prompt * request.base.n + sample)];
  }
};

}  // namespace

struct HttpServer::Impl {
  EngineService& service;
  ModelInfo model;
  ServerMetrics& metrics;
  HttpOptions options;
  httplib::Server http;
  int port = -1;
  int listen_fd = -1;  // the listening socket, to widen its backlog after bind
  std::atomic<bool> stopping{false};
  std::atomic<int> active{0};  // generation handlers running (a stream's until its provider is released)
  std::atomic<std::int64_t> next_id{0};
  std::mutex seed_mutex;
  std::mt19937_64 seeds{std::random_device{}()};

  Impl(EngineService& s, const ModelInfo& m, ServerMetrics& mt, HttpOptions o)
      : service(s), model(m), metrics(mt), options(std::move(o)) {}

  std::uint64_t random_seed() {
    std::lock_guard lock(seed_mutex);
    return seeds();
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void collect_whole(Generation& g, httplib::Response& res);
  bool pump(Generation& g, httplib::DataSink& sink);
};

HttpServer::HttpServer(EngineService& service, const ModelInfo& model, ServerMetrics& metrics, HttpOptions options)
    : impl_(std::make_unique<Impl>(service, model, metrics, std::move(options))) {
  routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  Impl& s = *impl_;
  s.port = s.options.port == 0 ? s.http.bind_to_any_port(s.options.host) : (s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1);
  HG_CHECK(s.port > 0, "serve: cannot listen on ", s.options.host, ":", s.options.port,
           " (in use, or not an address of this machine)");
  // Debian's cpp-httplib listens with a backlog of 5: a burst of clients past it has
  // connections dropped. Listening again on the bound socket widens the queue.
  if (s.listen_fd >= 0) ::listen(s.listen_fd, SOMAXCONN);
  return s.port;
}

void HttpServer::run() { impl_->http.listen_after_bind(); }

bool HttpServer::running() const { return impl_->http.is_running(); }

void HttpServer::refuse_new() { impl_->stopping = true; }

void HttpServer::wait_idle(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (impl_->active > 0 && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(5ms);
}

void HttpServer::stop() {
  impl_->stopping = true;
  impl_->http.stop();
}

void HttpServer::routes() {
  Impl& s = *impl_;
  const int threads = s.options.threads > 0 ? s.options.threads : 64;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  s.http.set_payload_max_length(s.options.max_body_bytes);
  s.http.set_keep_alive_timeout(2);
  s.http.set_tcp_nodelay(true);
  s.http.set_socket_options([&s](socket_t sock) {  // httplib's default (SO_REUSEADDR), and the fd kept
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    s.listen_fd = sock;
  });
  s.http.set_logger([&s](const httplib::Request&, const httplib::Response& res) { s.metrics.count_status(res.status); });
  s.http.set_pre_routing_handler([&s](const httplib::Request& req, httplib::Response& res) {
    if (s.options.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + s.options.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, req.has_header("Authorization") ? "the API key is wrong"
                                                                  : "an API key is needed: 'Authorization: Bearer KEY'",
                             "", "invalid_request_error", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  s.http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message = res.status == 413   ? "the request body is too large"
                                : res.status == 404 ? "no such endpoint: " + req.method + " " + req.path
                                                    : std::string("HTTP ") + std::to_string(res.status);
    res.set_content(dump(ApiError(res.status, message).body()), "application/json");
  });
  s.http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(dump(ApiError(500, what, "", "server_error").body()), "application/json");
  });
  s.http.Get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    res.status = s.stopping ? 503 : 200;
    res.set_content(s.stopping ? R"({"status":"stopping"})" : R"({"status":"ok"})", "application/json");
  });
  s.http.Get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.metrics.prometheus_text(), "text/plain; version=0.0.4");
  });
  s.http.Get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", s.model.name}, {"object", "model"}, {"created", unix_now()}, {"owned_by", "hydragen"},
                        {"max_model_len", s.model.context}};
    res.set_content(dump({{"object", "list"}, {"data", json::array({model})}}), "application/json");
  });
  s.http.Post("/v1/completions",
              [&s](const httplib::Request& req, httplib::Response& res) { s.generate(req, res, false); });
  s.http.Post("/v1/chat/completions",
              [&s](const httplib::Request& req, httplib::Response& res) { s.generate(req, res, true); });
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  // Counted while it runs; a stream hands its count to its provider's releaser.
  struct Active {
    std::atomic<int>& count;
    bool held = true;
    explicit Active(std::atomic<int>& c) : count(c) { ++count; }
    ~Active() {
      if (held) --count;
    }
  } active_guard(active);
  if (stopping) return send_error(res, ApiError(503, "the server is shutting down", "", "server_error"));
  auto g = std::make_shared<Generation>();
  try {
    g->request = chat ? parse_chat_request(req.body, model) : parse_completion_request(req.body, model);
  } catch (const ApiError& e) {
    return send_error(res, e);
  } catch (const std::exception& e) {
    return send_error(res, ApiError(400, e.what()));
  }
  OpenAiRequest& r = g->request;
  if (!r.seeded) r.base.sampling.seed = random_seed();
  std::vector<engine::GenerationRequest> requests;
  for (const auto& prompt : r.prompts) {
    engine::GenerationRequest one = r.base;
    one.prompt = prompt;
    g->prompt_tokens += static_cast<std::int64_t>(prompt.size());
    requests.push_back(std::move(one));
  }
  for (int i = 0; i < static_cast<int>(r.prompts.size()) * r.base.n; ++i) g->choices.emplace_back(model, g->request, i);
  g->started.assign(g->choices.size(), false);
  g->id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
  g->model = model.name;
  g->created = unix_now();
  g->fd = find_client_socket(req.remote_addr, req.remote_port, port);
  try {
    g->job = service.submit(std::move(requests));
  } catch (const ApiError& e) {
    return send_error(res, e);
  }
  if (!r.stream) return collect_whole(*g, res);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream", [this, g](std::size_t, httplib::DataSink& sink) { return pump(*g, sink); },
      [this, g](bool) {
        if (!g->finished) service.cancel(g->job);
        --active;
      });
  active_guard.held = false;
}

// A whole response: waits for every choice (cancelling the job if the client goes away).
void HttpServer::Impl::collect_whole(Generation& g, httplib::Response& res) {
  while (!g.finished) {
    for (JobEvent& e : g.job->take(kPoll)) {
      ChoiceState& c = g.choice_of(e.prompt, e.finished ? e.completion.sample : e.token.sample);
      if (!e.finished) {
        c.push(e.token);
        continue;
      }
      c.finish(e.completion);
      if (e.completion.finish_reason == "error" && g.error.empty()) g.error = e.completion.error;
      g.pool_full |= e.completion.kv_pool_full;
      g.cancelled |= e.completion.finish_reason == "cancelled";
    }
    g.finished = g.job->done();
    if (!g.finished && peer_closed(g.fd)) {
      service.cancel(g.job);
      res.status = 499;  // nobody reads it: the client has gone
      return;
    }
  }
  if (!g.error.empty())
    return send_error(res, ApiError(400, g.error, g.pool_full ? "max_tokens" : ""));
  if (g.cancelled) return send_error(res, ApiError(503, "the server stopped before the request finished", "", "server_error"));
  res.set_content(dump(completion_response(g.request, g.choices, g.id, g.created, g.model, g.prompt_tokens)),
                  "application/json");
}

// One call of the stream's content provider: the events there are as chunks; [DONE] at the end.
bool HttpServer::Impl::pump(Generation& g, httplib::DataSink& sink) {
  auto send = [&](const json& chunk) {
    const std::string line = "data: " + dump(chunk) + "\n\n";
    return sink.write(line.data(), line.size());
  };
  for (JobEvent& e : g.job->take(kPoll)) {
    const int sample = e.finished ? e.completion.sample : e.token.sample;
    ChoiceState& c = g.choice_of(e.prompt, sample);
    std::string text;
    const auto at = static_cast<std::size_t>(c.index());
    const bool first = !g.started[at];
    if (first && g.request.echo) text = g.request.prompt_texts[static_cast<std::size_t>(e.prompt)];
    g.started[at] = true;
    if (!e.finished) {
      text += c.push(e.token);
      json lp = c.take_logprobs();
      // Text held back (a partial character, a possible stop string) waits; without a tokenizer
      // every token is a chunk of its id.
      if (text.empty() && !first && lp.is_null() && model.tokenizer) continue;
      const std::vector<std::int32_t> ids = model.tokenizer ? std::vector<std::int32_t>{} : std::vector{e.token.token};
      if (!send(stream_chunk(g.request, g.id, g.created, g.model, c.index(), text, first, lp, nullptr, ids)))
        return false;
      continue;
    }
    text += c.finish(e.completion);
    const std::string& reason = e.completion.finish_reason;
    if (reason == "error") {
      if (!send(ApiError(400, e.completion.error, e.completion.kv_pool_full ? "max_tokens" : "").body())) return false;
      continue;
    }
    if (!send(stream_chunk(g.request, g.id, g.created, g.model, c.index(), text, first, nullptr, &reason))) return false;
  }
  if (g.job->done()) {
    g.finished = true;
    if (g.request.include_usage) {
      std::int64_t tokens = 0;
      for (const ChoiceState& c : g.choices) tokens += c.tokens();
      if (!send(usage_chunk(g.request, g.id, g.created, g.model, g.prompt_tokens, tokens))) return false;
    }
    const std::string done = "data: [DONE]\n\n";
    if (!sink.write(done.data(), done.size())) return false;
    sink.done();
    return true;
  }
  return !peer_closed(g.fd);
}

}  // namespace hydragen::server
