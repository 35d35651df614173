// `hydragen serve` under pressure and abuse, over loopback HTTP with the demo model: every bad
// field is a 400 naming it, big bodies 413, keys 401, a full queue 503 with Retry-After; a
// client that disconnects (streaming or not) has its sequences cancelled and pages returned;
// a tiny pool preempts and every request still gets its own tokens; a shared system prompt is
// a prefix-cache hit; shutdown lets a running stream finish, or cancels it past the deadline.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "server_test_util.h"

namespace hydragen {
namespace {

using nlohmann::json;
using test::TestServer;

struct BadCase {
  std::string body;
  std::string param;  // the field the error must name ("" for null)
  int status = 400;
};

TEST(ServerLimits, EveryBadFieldIsA400NamingIt) {
  TestServer server;
  const std::vector<BadCase> cases = {
      {"{\"prompt\": \"x\",", ""},
      {"[1, 2]", ""},
      {"{\"prompt\": \"\xff\xfe\"}", ""},
      {R"({"max_tokens": 4})", "prompt"},
      {R"({"prompt": 5})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt"},
      {R"({"prompt": [99999]})", "prompt"},
      {R"({"prompt": [[1, 2], 3]})", "prompt"},
      {R"({"prompt": "x", "n": 0})", "n"},
      {R"({"prompt": "x", "n": 100000})", "n"},
      {R"({"prompt": "x", "n": "2"})", "n"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": -5})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1000000})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
      {R"({"prompt": "x", "temperature": -0.1})", "temperature"},
      {R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {R"({"prompt": "x", "temperature": 1e999})", ""},  // the JSON reader refuses it
      {R"({"prompt": "x", "top_p": 0})", "top_p"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "top_k": -3})", "top_k"},
      {R"({"prompt": "x", "min_p": 2})", "min_p"},
      {R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty"},
      {R"({"prompt": "x", "frequency_penalty": -3})", "frequency_penalty"},
      {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
      {R"({"prompt": "x", "model": "gpt-4"})", "model"},
      {R"({"prompt": "x", "logit_bias": {"5": 10}})", "logit_bias"},
      {R"({"prompt": "x", "logprobs": 21})", "logprobs"},
      {R"({"prompt": "x", "logprobs": 2, "echo": true})", "echo"},
      {R"({"prompt": "x", "stop": 5})", "stop"},
      {R"({"prompt": "x", "stop": [""]})", "stop"},
      {R"({"prompt": "x", "stream": "yes"})", "stream"},
      {R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {R"({"prompt": "x", "seed": "s"})", "seed"},
  };
  for (const BadCase& c : cases) {
    const auto [status, out] = server.post("/v1/completions", c.body);
    EXPECT_EQ(status, c.status) << c.body;
    ASSERT_TRUE(out.is_object() && out.contains("error")) << c.body;
    const json& e = out["error"];
    EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << c.body;
    EXPECT_EQ(e["type"], "invalid_request_error") << c.body;
    EXPECT_TRUE(e.contains("code")) << c.body;
    if (c.param.empty()) EXPECT_TRUE(e["param"].is_null()) << c.body << " " << e.dump();
    else EXPECT_EQ(e["param"], c.param) << c.body << " " << e.dump();
  }
  const std::vector<BadCase> chat = {
      {R"({"max_tokens": 2})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": [5]})", "messages"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0})", "max_completion_tokens"},
  };
  for (const BadCase& c : chat) {
    const auto [status, out] = server.post("/v1/chat/completions", c.body);
    EXPECT_EQ(status, c.status) << c.body;
    ASSERT_TRUE(out.is_object() && out.contains("error")) << c.body;
    EXPECT_EQ(out["error"]["param"], c.param) << c.body << " " << out.dump();
  }
  // Unknown fields are ignored; the server still answers.
  const auto [status, out] = server.post("/v1/completions", R"({"prompt": "x", "max_tokens": 2, "frobnicate": [1]})");
  EXPECT_EQ(status, 200) << out.dump();
  EXPECT_EQ(server.post("/v1/nothing", "{}").first, 404);
}

TEST(ServerLimits, BigBodiesAre413AndKeysAreChecked) {
  server::StackOptions options;
  options.http.max_body_bytes = 1024;
  options.http.api_key = "sesame";
  TestServer server(options);
  const std::string big = R"({"prompt": ")" + std::string(4096, 'a') + R"("})";
  const httplib::Headers key = {{"Authorization", "Bearer sesame"}};
  const auto [big_status, big_out] = server.post("/v1/completions", big, key);
  EXPECT_EQ(big_status, 413);
  EXPECT_TRUE(big_out.contains("error")) << big_out.dump();
  const auto [none, none_out] = server.post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})");
  EXPECT_EQ(none, 401);
  EXPECT_EQ(none_out["error"]["code"], "invalid_api_key");
  EXPECT_EQ(server.post("/v1/completions", R"({"prompt": "x"})", {{"Authorization", "Bearer wrong"}}).first, 401);
  EXPECT_EQ(server.post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", key).first, 200);
  auto c = server.client();
  EXPECT_EQ(c.Get("/health")->status, 200) << "health needs no key";
}

TEST(ServerLimits, AFullQueueIs503WithRetryAfter) {
  server::StackOptions options;
  options.limits.max_running = 1;
  options.limits.max_queue = 0;
  TestServer server(options);
  std::atomic<bool> streaming{false};
  std::thread slow([&] {
    test::post_stream(server, "/v1/completions",
                      {{"prompt", "In the"}, {"max_tokens", 200}, {"temperature", 0}, {"ignore_eos", true}, {"stream", true}},
                      [&](const std::string& got) {
                        streaming = true;
                        return got.find("[DONE]") != std::string::npos;
                      });
  });
  ASSERT_TRUE(test::eventually([&] { return streaming.load(); }));
  auto c = server.client();
  const auto res = c.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  slow.join();
  EXPECT_EQ(server.post("/v1/completions", R"({"prompt": "x", "max_tokens": 1})").first, 200) << "room again";
}

// Pages held by sequences (not by the prefix cache) are back once every sequence has left.
bool pages_back(const TestServer& server) {
  return server.metric("hydragen_running_sequences") == 0 &&
         server.metric("hydragen_kv_pages_used") == server.metric("hydragen_kv_pages_cached");
}

TEST(ServerLimits, AStreamWhoseClientLeavesIsCancelledAndItsPagesReturn) {
  TestServer server;
  int chunks = 0;
  test::post_stream(server, "/v1/completions",
                    {{"prompt", "In the beginning"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}, {"n", 2}},
                    [&](const std::string& got) { return (chunks = static_cast<int>(test::sse_events(got).size())) >= 3; });
  EXPECT_GE(chunks, 3);
  EXPECT_TRUE(test::eventually([&] { return server.metric("hydragen_sequences_finished_total{reason=\"cancelled\"}") == 2; }));
  EXPECT_TRUE(test::eventually([&] { return pages_back(server); }));
  EXPECT_LT(server.metric("hydragen_generation_tokens_total"), 2 * 200);
}

TEST(ServerLimits, AWholeRequestWhoseClientLeavesIsCancelled) {
  TestServer server;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(server.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string body = R"({"prompt": "In the beginning", "max_tokens": 200, "ignore_eos": true})";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                              "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  ASSERT_TRUE(test::eventually([&] { return server.metric("hydragen_generation_tokens_total") >= 2; }));
  ::close(fd);
  EXPECT_TRUE(test::eventually([&] { return server.metric("hydragen_sequences_finished_total{reason=\"cancelled\"}") == 1; }));
  EXPECT_TRUE(test::eventually([&] { return pages_back(server); }));
  EXPECT_LT(server.metric("hydragen_generation_tokens_total"), 200);
}

TEST(ServerLimits, ATinyPoolPreemptsAndEveryRequestGetsItsOwnTokens) {
  // 14 pages of 16 tokens: four sequences of up to 9 + 60 tokens each cannot all hold theirs.
  TestServer server({}, 14);
  const std::vector<std::string> prompts = {"In the beginning", "And God said unto", "Blessed are the", "The LORD is"};
  std::vector<json> out(prompts.size());
  std::vector<std::thread> clients;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back([&, i] {
      out[i] = server.post_json("/v1/completions", json{{"prompt", prompts[i]}, {"max_tokens", 60}, {"temperature", 0.8},
                                                   {"seed", 11}, {"ignore_eos", true}})
                   .second;
    });
  for (auto& t : clients) t.join();
  EXPECT_TRUE(test::eventually([&] { return server.metric("hydragen_preemptions_total") > 0; }))
      << "the pool must be too small for this test to mean anything";
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    engine::GenerationRequest r = test::greedy_request(test::demo_serving().tokenizer->encode(prompts[i], true), 60);
    r.sampling.temperature = 0.8f, r.sampling.seed = 11;
    ASSERT_TRUE(out[i].contains("choices")) << out[i].dump();
    EXPECT_EQ(out[i]["choices"][0]["token_ids"].get<std::vector<std::int32_t>>(), test::engine_alone(r)[0].tokens)
        << prompts[i];
  }
}

TEST(ServerLimits, ASecondRequestWithTheSameSystemPromptHitsThePrefixCache) {
  TestServer server;
  std::string system = "And God said, Let there be light: and there was light. And God saw the light, that it was "
                       "good: and God divided the light from the darkness. ";
  system += system;
  const auto system_tokens = static_cast<double>(test::demo_serving().tokenizer->encode(system, true).size());
  ASSERT_GT(system_tokens, 40);
  server.completion({{"prompt", system + "Who"}, {"max_tokens", 2}, {"temperature", 0}});
  ASSERT_TRUE(test::eventually([&] { return server.metric("hydragen_running_sequences") == 0; }));
  const double hits = server.metric("hydragen_prefix_cache_hit_tokens_total");
  const double queries = server.metric("hydragen_prefix_cache_query_tokens_total");
  server.completion({{"prompt", system + "Where"}, {"max_tokens", 2}, {"temperature", 0}});
  EXPECT_TRUE(test::eventually([&] { return server.metric("hydragen_prefix_cache_query_tokens_total") > queries; }));
  const double new_hits = server.metric("hydragen_prefix_cache_hit_tokens_total") - hits;
  EXPECT_GE(new_hits, system_tokens - 1) << "the system prompt is not prefilled again";
  EXPECT_LT(new_hits, system_tokens + 4) << "only the shared part hits";
}

TEST(ServerLimits, ShutdownLetsARunningStreamFinish) {
  server::StackOptions options;
  options.shutdown_deadline = std::chrono::milliseconds(20000);
  TestServer server(options);
  std::string got;
  std::atomic<bool> started{false};
  std::thread client([&] {
    got = test::post_stream(server, "/v1/completions",
                            {{"prompt", "In the"}, {"max_tokens", 40}, {"ignore_eos", true}, {"stream", true}},
                            [&](const std::string&) {
                              started = true;
                              return false;
                            });
  });
  ASSERT_TRUE(test::eventually([&] { return started.load(); }));
  server.stack->shutdown();
  client.join();
  const auto events = test::sse_events(got);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(server.client().Get("/health")) << "no longer accepting";
}

TEST(ServerLimits, ShutdownPastItsDeadlineCancelsWhatRuns) {
  server::StackOptions options;
  options.shutdown_deadline = std::chrono::milliseconds(0);
  TestServer server(options);
  std::atomic<bool> started{false};
  std::string got;
  std::thread client([&] {
    got = test::post_stream(server, "/v1/completions",
                            {{"prompt", "In the"}, {"max_tokens", 240}, {"ignore_eos", true}, {"stream", true}},
                            [&](const std::string&) {
                              started = true;
                              return false;
                            });
  });
  ASSERT_TRUE(test::eventually([&] { return started.load(); }));
  const auto begin = std::chrono::steady_clock::now();
  server.stack->shutdown();
  client.join();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(10));
  const auto events = test::sse_events(got);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_LT(events.size(), 200u) << "cancelled, not run to its end";
}

}  // namespace
}  // namespace hydragen
