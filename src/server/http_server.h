// The HTTP surface over an EngineService (cpp-httplib): POST /v1/completions and
// /v1/chat/completions (whole or streamed as server-sent events), GET /v1/models, /health and
// /metrics. Bodies past a limit are 413, a missing or wrong API key 401, a full queue 503 with
// Retry-After, every bad field 400, all as OpenAI's error JSON. A client that disconnects has
// its job cancelled.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "server/engine_service.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace httplib {
class Server;
}

namespace hydragen::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: an ephemeral port (bind() says which)
  std::string api_key;  // empty: no key needed
  std::size_t max_body_bytes = std::size_t{16} << 20;
  int threads = 0;  // HTTP worker threads; 0: from the service's limits
};

class HttpServer {
 public:
  HttpServer(EngineService& service, const ModelInfo& model, ServerMetrics& metrics, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port; the port bound. Throws naming the address when it cannot.
  int bind();
  // Serves until stop(); returns when every handler has returned.
  void run();
  bool running() const;
  // Graceful stop, first half: new generation requests get 503 and /health reads 503.
  void refuse_new();
  // Waits (at most `timeout`) until no generation handler is running.
  void wait_idle(std::chrono::milliseconds timeout);
  // Closes the listener; handlers in progress are cut (refuse_new and wait_idle first).
  void stop();

 private:
  void routes();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hydragen::server
