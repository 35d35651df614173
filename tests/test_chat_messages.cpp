// template_messages: OpenAI messages as HF templates expect them (text parts joined, tool-call
// arguments parsed), and the errors that name the field. Its renders through real templates
// are compared with jinja2's in test_chat_jinja2.cpp (the "openai" conversations).
#include <gtest/gtest.h>

#include <string>

#include "chat/openai_messages.h"
#include "hydragen/error.h"

namespace hydragen::chat {
namespace {

using OJson = nlohmann::ordered_json;

std::string error_of(const OJson& messages) {
  try {
    template_messages(messages);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << messages.dump();
  return "";
}

TEST(ChatMessages, TextPartsBecomeOneString) {
  const OJson in = OJson::parse(R"([
    {"role": "system", "content": "plain"},
    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    {"role": "user", "content": []},
    {"role": "assistant", "content": null}])");
  const OJson out = template_messages(in);
  EXPECT_EQ(out[0]["content"], "plain");
  EXPECT_EQ(out[1]["content"], "a\nb");
  EXPECT_EQ(out[2]["content"], "");
  EXPECT_TRUE(out[3]["content"].is_null());
}

TEST(ChatMessages, ToolCallArgumentsStringsAreParsedInOrder) {
  const OJson in = OJson::parse(R"([{"role": "assistant", "tool_calls": [
    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{\"z\": 1, \"a\": [true]}"}},
    {"id": "b", "type": "function", "function": {"name": "g", "arguments": {"already": "object"}}}]}])");
  const OJson out = template_messages(in);
  EXPECT_EQ(out[0]["tool_calls"][0]["function"]["arguments"].dump(), R"({"z":1,"a":[true]})");
  EXPECT_EQ(out[0]["tool_calls"][1]["function"]["arguments"], in[0]["tool_calls"][1]["function"]["arguments"]);
  EXPECT_EQ(out[0]["tool_calls"][0]["id"], "a");
}

TEST(ChatMessages, ErrorsNameTheField) {
  EXPECT_NE(error_of(OJson::object()).find("messages must be a list"), std::string::npos);
  EXPECT_NE(error_of(OJson::parse(R"([1])")).find("messages[0] must be an object"), std::string::npos);
  EXPECT_NE(error_of(OJson::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])"))
                .find("messages[0].content[0].type must be \"text\""),
            std::string::npos);
  EXPECT_NE(error_of(OJson::parse(R"([{"role": "user"}, {"role": "user", "content": [{"type": "text"}]}])"))
                .find("messages[1].content[0].text must be a string"),
            std::string::npos);
  const std::string bad_args = error_of(OJson::parse(
      R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}]}])"));
  EXPECT_NE(bad_args.find("messages[0].tool_calls[0].function.arguments must be a JSON object"), std::string::npos)
      << bad_args;
  EXPECT_NE(error_of(OJson::parse(R"([{"role": "assistant", "tool_calls": [{"function": {"arguments": "[1]"}}]}])"))
                .find("got array"),
            std::string::npos);
}

TEST(ChatMessages, DeepArgumentsAreRefusedBeforeParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  OJson in = OJson::parse(R"([{"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}])");
  in[0]["tool_calls"][0]["function"]["arguments"] = deep;
  EXPECT_NE(error_of(in).find("nests deeper than 64 levels"), std::string::npos);
  in[0]["tool_calls"][0]["function"]["arguments"] = R"({"s": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"]]"})";
  EXPECT_EQ(template_messages(in)[0]["tool_calls"][0]["function"]["arguments"]["s"].get<std::string>().size(), 69u);
}

}  // namespace
}  // namespace hydragen::chat
