// `hydragen serve`'s HTTP surface over real loopback HTTP with the demo model (CPU): the
// completions and chat endpoints against the engine's own tokens, prompt forms, n, seeds,
// stop strings, penalties, logprobs, echo, streaming with usage, concurrent clients, models,
// health and metrics, the listen queue, a burst of streams. Limits, bad input, cancellation and shutdown: test_server_limits.cpp.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <thread>

#include "server_test_util.h"

namespace hydragen {
namespace {

using nlohmann::json;
using test::TestServer;

std::vector<std::int32_t> ids_of(const json& choice) { return choice.at("token_ids").get<std::vector<std::int32_t>>(); }

engine::GenerationRequest greedy(std::vector<std::int32_t> prompt, std::int64_t tokens) {
  engine::GenerationRequest r = test::greedy_request(std::move(prompt), tokens);
  r.stop_token_ids = test::demo_serving().eos;
  return r;
}

std::vector<std::int32_t> encode(const std::string& text, bool special = true) {
  return test::demo_serving().tokenizer->encode(text, special);
}

TEST(Server, GreedyCompletionIsTheEnginesWithItsTextAndUsage) {
  TestServer server;
  const json out = server.completion({{"prompt", "In the beginning"}, {"max_tokens", 10}, {"temperature", 0}});
  const auto expected = test::engine_alone(greedy(encode("In the beginning"), 10));
  ASSERT_EQ(out["choices"].size(), 1u);
  EXPECT_EQ(ids_of(out["choices"][0]), expected[0].tokens);
  EXPECT_EQ(out["choices"][0]["text"], test::demo_serving().tokenizer->decode(expected[0].tokens, true));
  EXPECT_EQ(out["object"], "text_completion");
  EXPECT_EQ(out["model"], "demo");
  EXPECT_EQ(out["usage"]["prompt_tokens"], encode("In the beginning").size());
  EXPECT_EQ(out["usage"]["completion_tokens"], expected[0].tokens.size());
  EXPECT_EQ(out["choices"][0]["finish_reason"], expected[0].finish_reason == "length" ? "length" : "stop");
}

TEST(Server, EveryPromptFormAndNGiveChoicesInOrder) {
  TestServer server;
  const auto a = encode("And God said"), b = encode("Blessed are");
  const auto ta = test::engine_alone(greedy(a, 6))[0].tokens, tb = test::engine_alone(greedy(b, 6))[0].tokens;
  const json forms[] = {json::array({"And God said", "Blessed are"}), json::array({a, b}),
                        json::array({"And God said", b})};
  for (const json& prompt : forms) {
    const json out = server.completion({{"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}, {"n", 2}});
    ASSERT_EQ(out["choices"].size(), 4u) << prompt.dump();
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(out["choices"][i]["index"], i);
      EXPECT_EQ(ids_of(out["choices"][i]), i < 2 ? ta : tb) << prompt.dump() << " choice " << i;
    }
    EXPECT_EQ(out["usage"]["prompt_tokens"], a.size() + b.size());
  }
  const json one = server.completion({{"prompt", a}, {"max_tokens", 6}, {"temperature", 0}});
  EXPECT_EQ(ids_of(one["choices"][0]), ta);
}

TEST(Server, ASeedReproducesItsSamplesAndSamplesDiffer) {
  TestServer server;
  const json body = {{"prompt", "And the LORD"}, {"max_tokens", 12}, {"temperature", 1.0}, {"seed", 7}, {"n", 3}};
  const json first = server.completion(body), second = server.completion(body);
  std::set<std::vector<std::int32_t>> distinct;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ids_of(first["choices"][i]), ids_of(second["choices"][i]));
    distinct.insert(ids_of(first["choices"][i]));
  }
  EXPECT_GT(distinct.size(), 1u) << "samples i use seed + i";
  engine::GenerationRequest r = greedy(encode("And the LORD"), 12);
  r.sampling.temperature = 1, r.sampling.seed = 7, r.n = 3;
  const auto expected = test::engine_alone(r);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ids_of(first["choices"][i]), expected[static_cast<std::size_t>(i)].tokens);
}

TEST(Server, AStopStringCutsTheTextAndStops) {
  TestServer server;
  const json whole = server.completion({{"prompt", "In the beginning"}, {"max_tokens", 20}, {"temperature", 0}});
  const std::string text = whole["choices"][0]["text"];
  ASSERT_GT(text.size(), 12u);
  const std::string stop = text.substr(8, 4);
  const auto cut = text.find(stop);
  const json out = server.completion(
      {{"prompt", "In the beginning"}, {"max_tokens", 20}, {"temperature", 0}, {"stop", json::array({"zzzz", stop})}});
  EXPECT_EQ(out["choices"][0]["text"], text.substr(0, cut));
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(out["usage"]["completion_tokens"].get<int>(), whole["usage"]["completion_tokens"].get<int>());
}

TEST(Server, PenaltiesReachTheSampler) {
  TestServer server;
  const json out = server.completion({{"prompt", "In the beginning"}, {"max_tokens", 16}, {"temperature", 0},
                                      {"frequency_penalty", 1.5}, {"presence_penalty", 0.5},
                                      {"repetition_penalty", 1.3}});
  engine::GenerationRequest r = greedy(encode("In the beginning"), 16);
  r.sampling.frequency_penalty = 1.5f, r.sampling.presence_penalty = 0.5f, r.sampling.repetition_penalty = 1.3f;
  const auto expected = test::engine_alone(r)[0].tokens;
  EXPECT_EQ(ids_of(out["choices"][0]), expected);
  EXPECT_NE(expected, test::engine_alone(greedy(encode("In the beginning"), 16))[0].tokens);
}

TEST(Server, LogprobsInTheCompletionsAndTheChatForms) {
  TestServer server;
  const json out = server.completion({{"prompt", "In the beginning"}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 3}});
  const json& lp = out["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u);
  for (std::size_t t = 0; t < 5; ++t) {
    ASSERT_EQ(lp["top_logprobs"][t].size(), 3u);
    double best = -1e9;
    for (const auto& [token, value] : lp["top_logprobs"][t].items()) best = std::max(best, value.get<double>());
    EXPECT_FLOAT_EQ(static_cast<float>(best), lp["token_logprobs"][t].get<float>()) << "greedy: the top token";
    EXPECT_LE(lp["token_logprobs"][t].get<double>(), 0.0);
  }
  const json chat = server.post_json("/v1/chat/completions",
                                json{{"messages", json::array({{{"role", "user"}, {"content", "Who made heaven?"}}})},
                                     {"max_tokens", 4}, {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 2}})
                        .second;
  const json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 4u) << chat.dump();
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][0]["logprob"], content[0]["logprob"]);
}

TEST(Server, EchoPutsThePromptFirst) {
  TestServer server;
  const json out = server.completion({{"prompt", "In the beginning"}, {"max_tokens", 4}, {"temperature", 0}, {"echo", true}});
  const std::string text = out["choices"][0]["text"];
  EXPECT_EQ(text.rfind("In the beginning", 0), 0u) << text;
  EXPECT_GT(text.size(), std::string("In the beginning").size());
}

TEST(Server, ChatRendersTheTemplateAndAnswersAsTheEngine) {
  TestServer server;
  const json messages = json::array({{{"role", "system"}, {"content", "Answer in the words of the King James Bible."}},
                                     {{"role", "user"}, {"content", "Who made the light?"}}});
  const auto [status, out] =
      server.post_json("/v1/chat/completions", json{{"messages", messages}, {"max_completion_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(status, 200) << out.dump();
  const std::string rendered =
      "<|im_start|>system\nAnswer in the words of the King James Bible.<|im_end|>\n<|im_start|>user\nWho made the "
      "light?<|im_end|>\n<|im_start|>assistant\n";
  const auto expected = test::engine_alone(greedy(encode(rendered, false), 8))[0].tokens;
  EXPECT_EQ(ids_of(out["choices"][0]), expected);
  EXPECT_EQ(out["object"], "chat.completion");
  EXPECT_EQ(out["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(out["choices"][0]["message"]["content"], test::demo_serving().tokenizer->decode(expected, true));
  EXPECT_EQ(out["usage"]["prompt_tokens"], encode(rendered, false).size());
}

TEST(Server, AStreamIsTheWholeResponseInChunksEndingWithDone) {
  TestServer server;
  const json body = {{"prompt", "In the beginning"}, {"max_tokens", 12}, {"temperature", 0}, {"n", 2}};
  const json whole = server.completion(body);
  json streamed = body;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const auto events = test::sse_events(test::post_stream(server, "/v1/completions", streamed));
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text[2];
  int finishes = 0;
  for (std::size_t e = 0; e + 2 < events.size(); ++e) {
    const json chunk = json::parse(events[e]);
    EXPECT_EQ(chunk["object"], "text_completion");
    EXPECT_TRUE(chunk["usage"].is_null());
    const json& c = chunk["choices"][0];
    text[c["index"].get<int>()] += c["text"].get<std::string>();
    finishes += !c["finish_reason"].is_null();
  }
  EXPECT_EQ(finishes, 2);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(text[i], whole["choices"][i]["text"]) << "choice " << i;
  const json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"], whole["usage"]);

  const json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Who made the light?"}}})},
                     {"max_tokens", 8}, {"temperature", 0}};
  const json chat_whole = server.post_json("/v1/chat/completions", chat).second;
  json chat_stream = chat;
  chat_stream["stream"] = true;
  const auto chat_events = test::sse_events(test::post_stream(server, "/v1/chat/completions", chat_stream));
  ASSERT_GE(chat_events.size(), 2u);
  EXPECT_EQ(chat_events.back(), "[DONE]");
  std::string content;
  for (std::size_t e = 0; e + 1 < chat_events.size(); ++e) {
    const json chunk = json::parse(chat_events[e]);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    const json& delta = chunk["choices"][0]["delta"];
    if (e == 0) EXPECT_EQ(delta["role"], "assistant");
    if (delta.contains("content")) content += delta["content"].get<std::string>();
  }
  EXPECT_EQ(content, chat_whole["choices"][0]["message"]["content"]);
}

TEST(Server, ConcurrentClientsEachGetWhatTheyWouldAlone) {
  TestServer server;
  const std::vector<std::string> prompts = {"In the beginning", "And God said", "Blessed are the", "The LORD is my",
                                            "And it came to pass", "Thou shalt not", "Let there be", "Behold"};
  std::vector<json> out(prompts.size());
  std::vector<std::thread> clients;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back([&, i] {
      out[i] = server.post_json("/v1/completions", json{{"prompt", prompts[i]}, {"max_tokens", 16}, {"temperature", 0}}).second;
    });
  for (auto& t : clients) t.join();
  for (std::size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(ids_of(out[i]["choices"][0]), test::engine_alone(greedy(encode(prompts[i]), 16))[0].tokens) << prompts[i];
  EXPECT_TRUE(test::eventually([&] {
    return server.metric("hydragen_http_requests_total{status=\"200\"}") == static_cast<double>(prompts.size());
  }));
}

TEST(Server, ModelsHealthAndMetricsAnswer) {
  TestServer server;
  auto c = server.client();
  const auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json list = json::parse(models->body);
  EXPECT_EQ(list["data"][0]["id"], "demo");
  const auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  server.completion({{"prompt", "In the beginning"}, {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_TRUE(test::eventually([&] { return server.metric("hydragen_generation_tokens_total") == 4; }));
  EXPECT_EQ(server.metric("hydragen_time_to_first_token_seconds_count"), 1);
  EXPECT_EQ(server.metric("hydragen_inter_token_latency_seconds_count"), 3);
  EXPECT_EQ(server.metric("hydragen_request_latency_seconds_count"), 1);
  EXPECT_EQ(server.metric("hydragen_running_sequences"), 0);
  EXPECT_NE(server.metrics_text().find("hydragen_kv_pages_shared"), std::string::npos);
}

// The listening socket's accept queue (TCP_INFO of a LISTEN socket reports its backlog in
// tcpi_sacked): a burst of clients must not find it full.
TEST(Server, TheListenQueueHoldsABurstOfClients) {
  TestServer server;
  int backlog = -1;
  for (int fd = 0; fd < 4096; ++fd) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    tcp_info info{};
    socklen_t info_len = sizeof info;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0 || local.sin_family != AF_INET ||
        ntohs(local.sin_port) != server.port || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_len) != 0 ||
        info.tcpi_state != TCP_LISTEN)
      continue;
    backlog = static_cast<int>(info.tcpi_sacked);
  }
  EXPECT_GE(backlog, 128) << "the server's listen backlog";
}

// 96 streaming clients at once, twice over (new connections from freshly reused ports): every
// stream ends with [DONE] (a full accept queue, or a new connection taken for an old one whose
// socket is not closed yet, cut streams off).
TEST(Server, ABurstOfStreamingClientsAllFinish) {
  server::StackOptions options;
  options.http.threads = 256;
  TestServer server(options);
  constexpr int kClients = 96;
  std::vector<int> done(kClients, 0);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      for (int round = 0; round < 2; ++round) {
        const json body = {{"prompt", "And God said"}, {"max_tokens", 4}, {"stream", true}, {"seed", i}};
        done[static_cast<std::size_t>(i)] += test::post_stream(server, "/v1/completions", body).find("data: [DONE]") != std::string::npos;
      }
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(std::count(done.begin(), done.end(), 2), kClients);
}

}  // namespace
}  // namespace hydragen
