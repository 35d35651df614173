// A whole server over a model runner: the model's facts for request checks (ModelInfo), the
// engine on its thread (EngineService), the HTTP surface (HttpServer) on a thread of its own.
// `hydragen serve`, `hydragen bench serve` and the tests build one of these.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chat/template.h"
#include "engine/engine.h"
#include "server/engine_service.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace hydragen::server {

struct StackOptions {
  std::string served_model_name = "hydragen";
  HttpOptions http;
  ServiceLimits limits;
  engine::EngineOptions engine;  // detokenize is set from the tokenizer
  std::vector<std::int32_t> eos_ids;
  int max_n = 128;
  std::chrono::milliseconds shutdown_deadline{10000};
};

class ServerStack {
 public:
  // `tokenizer` (may be null) must outlive the stack; `chat_template` is parsed here (a
  // template the interpreter cannot run throws, naming the construct).
  ServerStack(engine::ModelRunner& runner, const Tokenizer* tokenizer,
              const std::optional<chat::ChatTemplateSource>& chat_template, StackOptions options);
  ~ServerStack();
  // Binds (the port: options.http.port, or an ephemeral one for 0) and serves on a thread.
  int start();
  int port() const { return port_; }
  // Stops accepting, lets what runs finish until the deadline, cancels the rest; joins.
  void shutdown();
  ServerMetrics& metrics() { return metrics_; }
  const ModelInfo& model() const { return model_; }

 private:
  StackOptions options_;
  std::optional<chat::Template> template_;
  ModelInfo model_;
  ServerMetrics metrics_;
  std::unique_ptr<EngineService> service_;
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
  int port_ = -1;
  bool stopped_ = false;
};

}  // namespace hydragen::server
