// Shared by the server tests: the demo model (models/demo) behind a ServerStack on an
// ephemeral loopback port, a client that posts JSON and reads server-sent events, and the
// engine's own answer to compare with (a fresh Engine over the same weights).
#pragma once

#include <httplib.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "demo_model_fixtures.h"
#include "engine/engine.h"
#include "engine_test_util.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "server/server_stack.h"
#include "tokenizer/tokenizer.h"

namespace hydragen::test {

// ChatML, as Qwen2.5's template writes it without tools.
inline const char* kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct DemoServing {
  ModelConfig config;
  LlamaWeights weights;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<std::int32_t> eos;
  DemoServing() {
    const auto dir = demo_model_dir();
    config = load_model_config(dir);
    weights = load_weights(config, Checkpoint(dir));
    tokenizer = load_tokenizer(dir);
    eos = tokenizer->special_tokens().eos_ids;
  }
  std::unique_ptr<engine::ModelRunner> runner(std::int64_t pages = 512, int page_size = 16) const {
    engine::RunnerOptions o;
    o.kv_pages = pages;
    o.page_size = page_size;
    return engine::make_cpu_runner(config, weights, o);
  }
};

inline const DemoServing& demo_serving() {
  static const DemoServing demo;
  return demo;
}

// A server over the demo model, started; shut down when it goes.
struct TestServer {
  std::unique_ptr<engine::ModelRunner> runner;
  std::unique_ptr<server::ServerStack> stack;
  int port = 0;
  explicit TestServer(server::StackOptions options = {}, std::int64_t pages = 512, bool chat = true) {
    const DemoServing& demo = demo_serving();
    runner = demo.runner(pages);
    options.served_model_name = "demo";
    options.http.port = 0;
    options.eos_ids = demo.eos;
    if (options.http.threads == 0) options.http.threads = 32;
    std::optional<chat::ChatTemplateSource> tpl;
    if (chat) tpl = chat::ChatTemplateSource{kChatMl, "", "", "test"};
    stack = std::make_unique<server::ServerStack>(*runner, demo.tokenizer.get(), tpl, options);
    port = stack->start();
  }
  httplib::Client client(int timeout_s = 60) const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(timeout_s, 0);
    c.set_connection_timeout(5, 0);
    return c;
  }
  // status and parsed body (null when the body is not JSON)
  std::pair<int, nlohmann::json> post(const std::string& path, const std::string& body,
                                      const httplib::Headers& headers = {}) const {
    auto c = client();
    auto res = c.Post(path.c_str(), headers, body, "application/json");
    if (!res) return {-1, nullptr};
    return {res->status, nlohmann::json::parse(res->body, nullptr, false)};
  }
  std::pair<int, nlohmann::json> post_json(const std::string& path, const nlohmann::json& body) const {
    return post(path, body.dump());
  }
  nlohmann::json completion(const nlohmann::json& body) const {
    auto [status, out] = post_json("/v1/completions", body);
    EXPECT_EQ(status, 200) << out.dump();
    return out;
  }
  std::string metrics_text() const {
    auto c = client();
    auto res = c.Get("/metrics");
    return res ? res->body : std::string();
  }
  // A metric's value (the first line naming it exactly, with its labels), or -1.
  double metric(const std::string& name_and_labels) const {
    const std::string text = metrics_text();
    const std::string key = "\n" + name_and_labels + " ";
    const auto at = text.find(key);
    if (at == std::string::npos) return -1;
    return std::stod(text.substr(at + key.size()));
  }
};

// The data of each "data: ..." event of an SSE body, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const auto end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6));
    at = end == std::string::npos ? body.size() : end + 2;
  }
  return out;
}

// A streamed POST: the whole SSE body, or the part read before `stop_after` returned true (the
// client then drops the connection).
inline std::string post_stream(const TestServer& server, const std::string& path, const nlohmann::json& body,
                               const std::function<bool(const std::string&)>& stop_after = nullptr) {
  auto c = server.client();
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string got;
  req.content_receiver = [&](const char* data, std::size_t len, std::uint64_t, std::uint64_t) {
    got.append(data, len);
    return !(stop_after && stop_after(got));
  };
  c.send(req);
  return got;
}

// The engine's own tokens for one request (a fresh engine, a roomy pool).
inline std::vector<engine::Completion> engine_alone(const engine::GenerationRequest& request) {
  auto runner = demo_serving().runner(1024);
  engine::Engine engine(*runner, {});
  return engine.generate(std::vector<engine::GenerationRequest>{request});
}

// Polls `done` every 10 ms for at most `seconds`.
template <class Done>
bool eventually(Done done, double seconds = 10) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

}  // namespace hydragen::test
