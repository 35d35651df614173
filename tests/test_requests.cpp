// Request lines of `generate --requests` (tools/requests.h) and the --output lines written for
// them: the malformed lines a careless or hostile client sends each fail alone with the field
// named, OpenAI's field names mean what they mean there, and what is written stays valid JSON.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "completion_lines.h"
#include "core/utf8.h"
#include "hydragen/error.h"
#include "requests.h"
#include "test_model_fixtures.h"

namespace hydragen::cli {
namespace {

using ::testing::HasSubstr;

std::string line_error(const std::string& line) {
  const ParsedRequest parsed = parse_request_line(line, engine::GenerationRequest{}, nullptr);
  EXPECT_EQ(utf8_invalid_at(parsed.error), std::string::npos);
  return parsed.error.empty() ? "no error" : parsed.error;
}

TEST(RequestLines, MalformedLinesNameTheField) {
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "n": )" + std::string(100000, '[') + std::string(100000, ']') + "}"),
              HasSubstr("JSON nested deeper than 64 levels"));
  EXPECT_THAT(line_error("{\"prompt_ids\": [1], \"stop\": [\"\xff\"]}"), HasSubstr("invalid UTF-8 at byte 30"));
  EXPECT_THAT(line_error("{\xe2\x80\x9cprompt_ids\xe2\x80\x9d: [1]}"), HasSubstr("not valid JSON at byte 1"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "n": 0})"), HasSubstr("\"n\" is out of range [1, 1048576]: 0"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "n": 1e30})"), HasSubstr("\"n\" must be an integer"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "max_tokens": 0})"), HasSubstr("\"max_tokens\" is out of range"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [4294967296]})"), HasSubstr("\"prompt_ids\" is out of range"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "temperature": -1})"), HasSubstr("\"temperature\" must be finite"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "top_p": 2})"), HasSubstr("\"top_p\" must be in (0, 1]"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "presence_penalty": 2.5})"),
              HasSubstr("\"presence_penalty\" must be in [-2, 2]"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "repetition_penalty": -1})"),
              HasSubstr("\"repetition_penalty\" must be finite and > 0"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "stop": ""})"), HasSubstr("\"stop\" holds an empty string"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "stop": [1]})"), HasSubstr("\"stop\" must be a string or an array"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "max_tokens": 3, "max_new_tokens": 3})"),
              HasSubstr("give one of \"max_tokens\" and \"max_new_tokens\""));
  EXPECT_THAT(line_error(R"({"prompt": ["a", "b"]})"), HasSubstr("one prompt per line"));
  EXPECT_THAT(line_error(R"({"prompt": "hello"})"), HasSubstr("has none (tokenizer.json or tokenizer.model)"));
  EXPECT_THAT(line_error(R"({"prompt_ids": [1], "logit_bias": {}})"), HasSubstr("unknown field \"logit_bias\""));
}

TEST(RequestLines, OpenAiFieldNames) {
  const ParsedRequest r = parse_request_line(
      R"({"prompt": [5, 6, 7], "n": 3, "max_tokens": 9, "stop": "END", "seed": 11, "temperature": 0.5})",
      engine::GenerationRequest{}, nullptr);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.request.prompt, (std::vector<std::int32_t>{5, 6, 7}));
  EXPECT_EQ(r.request.n, 3);
  EXPECT_EQ(r.request.max_new_tokens, 9);
  EXPECT_EQ(r.request.stop_strings, (std::vector<std::string>{"END"}));
  EXPECT_EQ(r.request.sampling.seed, 11u);
  const ParsedRequest list = parse_request_line(R"({"prompt_ids": [1], "stop": ["a", "b"]})", {}, nullptr);
  EXPECT_EQ(list.request.stop_strings, (std::vector<std::string>{"a", "b"}));
}

// What --output writes for a malformed line and for a completion is valid JSON in valid UTF-8
// even when the error or the text holds invalid bytes (nlohmann's dump would throw).
TEST(OutputLines, StayValidJson) {
  const std::string error = "line 3: unknown field \"\xff\"";
  const std::string line = error_line(3, error);
  EXPECT_EQ(utf8_invalid_at(line), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(line)["error"], utf8_lossy(error));
  engine::Completion c;
  c.tokens = {1, 2};
  c.logprobs = {-0.5f, -1.0f};
  c.finish_reason = "stop";
  const std::string text = "cut \xe6\x97";
  const nlohmann::json back = nlohmann::json::parse(completion_line(c, 2, 4, &text));
  EXPECT_EQ(back["text"], "cut \xEF\xBF\xBD");
  EXPECT_EQ(back["request"], 2);
  EXPECT_EQ(back["prompt_tokens"], 4);
}

std::vector<ParsedRequest> read_file_of(const std::string& text) {
  test::ScratchDir dir("requests");
  std::ofstream(dir.path() / "r.jsonl", std::ios::binary) << text;
  return read_requests_jsonl((dir.path() / "r.jsonl").string(), engine::GenerationRequest{}, nullptr);
}

// A line past kMaxRequestLineBytes fails alone (its bytes skipped, never held), and the lines
// around it are read; lines are numbered in the errors and kept in ParsedRequest::line.
TEST(RequestFiles, LongLinesFailAlone) {
  const std::string huge = "{\"prompt_ids\": [" + std::string(kMaxRequestLineBytes, ' ') + "1]}";
  const std::vector<ParsedRequest> requests =
      read_file_of("{\"prompt_ids\": [1]}\n\n" + huge + "\n{\"prompt_ids\": [2]}");
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].error, "");
  EXPECT_THAT(requests[1].error, HasSubstr("r.jsonl:3: the line is longer than 64 MiB"));
  EXPECT_EQ(requests[1].line, 3);
  EXPECT_EQ(requests[2].error, "");
  EXPECT_EQ(requests[2].request.prompt, (std::vector<std::int32_t>{2}));
  EXPECT_EQ(requests[2].line, 4);
}

TEST(RequestFiles, OnlyRegularFiles) {
  test::ScratchDir dir("requests");
  auto error_of = [](const std::string& path) {
    try {
      read_requests_jsonl(path, engine::GenerationRequest{}, nullptr);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of(dir.path().string()), HasSubstr("--requests: "));
  EXPECT_THAT(error_of(dir.path().string()), HasSubstr("is a directory, not a regular file"));
  EXPECT_THAT(error_of("/dev/zero"), HasSubstr("/dev/zero: is a character device"));
  ASSERT_EQ(::mkfifo((dir.path() / "fifo").c_str(), 0600), 0);
  EXPECT_THAT(error_of((dir.path() / "fifo").string()), HasSubstr("is a FIFO (named pipe)"));
}

}  // namespace
}  // namespace hydragen::cli
