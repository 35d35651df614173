// load_chat_template: where a model folder's chat template comes from, its bos/eos strings, and
// the errors that name the file.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "chat/template.h"

namespace hydragen::chat {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

class ChatTemplateLoader : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("hydragen_chat_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name, std::ios::binary) << text; }

  // The Error load_chat_template throws; fails the test when there is none.
  std::string load_error(const std::string& override_file = "") {
    try {
      load_chat_template(dir_.string(), override_file);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }

  fs::path dir_;
};

TEST_F(ChatTemplateLoader, ReadsTheTokenizerConfigString) {
  write("tokenizer_config.json",
        Json{{"chat_template", "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"},
             {"bos_token", Json{{"__type", "AddedToken"}, {"content", "<s>"}, {"lstrip", false}}},
             {"eos_token", "</s>"}}
            .dump());
  const ChatTemplateSource s = load_chat_template(dir_.string());
  EXPECT_EQ(s.source, "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ(s.bos_token, "<s>");
  EXPECT_EQ(s.eos_token, "</s>");
  EXPECT_EQ(s.origin, (dir_ / "tokenizer_config.json").string());
}

TEST_F(ChatTemplateLoader, PicksTheDefaultOfANamedList) {
  write("tokenizer_config.json",
        Json{{"chat_template", Json::array({Json{{"name", "tool_use"}, {"template", "tools"}},
                                            Json{{"name", "default"}, {"template", "plain"}}})},
             {"eos_token", nullptr}}
            .dump());
  const ChatTemplateSource s = load_chat_template(dir_.string());
  EXPECT_EQ(s.source, "plain");
  EXPECT_EQ(s.bos_token, "");
  EXPECT_EQ(s.eos_token, "");
}

TEST_F(ChatTemplateLoader, ANamedListWithoutDefaultIsAnError) {
  write("tokenizer_config.json", Json{{"chat_template", Json::array({Json{{"name", "rag"}, {"template", "x"}}})}}.dump());
  EXPECT_NE(load_error().find("no template named \"default\""), std::string::npos);
  write("tokenizer_config.json", Json{{"chat_template", Json::array({Json{{"name", 3}}})}}.dump());
  EXPECT_NE(load_error().find("{\"name\": str, \"template\": str}"), std::string::npos);
}

TEST_F(ChatTemplateLoader, ChatTemplateJinjaComesBeforeTheConfig) {
  write("tokenizer_config.json", Json{{"chat_template", "from config"}, {"eos_token", "<|im_end|>"}}.dump());
  write("chat_template.jinja", "from jinja file\n");
  const ChatTemplateSource s = load_chat_template(dir_.string());
  EXPECT_EQ(s.source, "from jinja file\n");
  EXPECT_EQ(s.eos_token, "<|im_end|>");
  EXPECT_EQ(s.origin, (dir_ / "chat_template.jinja").string());
}

TEST_F(ChatTemplateLoader, AnOverrideFileComesFirst) {
  write("tokenizer_config.json", Json{{"chat_template", "from config"}}.dump());
  write("mine.jinja", "override {{ 1 }}");
  const ChatTemplateSource s = load_chat_template(dir_.string(), (dir_ / "mine.jinja").string());
  EXPECT_EQ(s.source, "override {{ 1 }}");
  EXPECT_EQ(s.origin, (dir_ / "mine.jinja").string());
  EXPECT_NE(load_error((dir_ / "absent.jinja").string()).find("absent.jinja"), std::string::npos);
}

TEST_F(ChatTemplateLoader, SpecialTokensMapFillsMissingTokens) {
  write("chat_template.jinja", "x");
  write("special_tokens_map.json", Json{{"bos_token", Json{{"content", "<bos>"}}}, {"eos_token", "<eos>"}}.dump());
  const ChatTemplateSource s = load_chat_template(dir_.string());
  EXPECT_EQ(s.bos_token, "<bos>");
  EXPECT_EQ(s.eos_token, "<eos>");
}

TEST_F(ChatTemplateLoader, NoTemplateNamesTheFolder) {
  write("tokenizer_config.json", Json{{"eos_token", "</s>"}}.dump());
  const std::string e = load_error();
  EXPECT_NE(e.find(dir_.string()), std::string::npos) << e;
  EXPECT_NE(e.find("has no chat template"), std::string::npos) << e;
  fs::remove(dir_ / "tokenizer_config.json");
  EXPECT_NE(load_error().find("no tokenizer_config.json"), std::string::npos);
}

TEST_F(ChatTemplateLoader, BrokenFilesAreNamed) {
  write("tokenizer_config.json", "{\"chat_template\": ");
  const std::string malformed = load_error();
  EXPECT_NE(malformed.find("tokenizer_config.json: not valid JSON at byte"), std::string::npos) << malformed;
  write("tokenizer_config.json", Json{{"chat_template", 5}}.dump());
  EXPECT_NE(load_error().find("chat_template must be a string"), std::string::npos);
  write("tokenizer_config.json", Json{{"chat_template", "x"}, {"bos_token", 7}}.dump());
  EXPECT_NE(load_error().find("bos_token must be a string or {\"content\": ...}"), std::string::npos);
}

TEST_F(ChatTemplateLoader, ATemplateThatCannotParseNamesFileAndPosition) {
  write("chat_template.jinja", "ok\n{% include 'other.jinja' %}");
  const std::string e = load_error();
  EXPECT_NE(e.find("chat_template.jinja"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2:4"), std::string::npos) << e;
  EXPECT_NE(e.find("'include'"), std::string::npos) << e;
}

TEST_F(ChatTemplateLoader, OversizedTemplatesAreRefused) {
  write("chat_template.jinja", std::string((1u << 20) + 1, 'x'));
  EXPECT_NE(load_error().find("is more than the 1 MiB this file may have"), std::string::npos);
}

// Its files are read as every outside file is: regular files only (a FIFO would block the
// loader), JSON through the bounded reader (a deep value is refused, naming the file).
TEST_F(ChatTemplateLoader, FifosAndDeepJsonAreRefusedByName) {
  ASSERT_EQ(::mkfifo((dir_ / "chat_template.jinja").c_str(), 0600), 0);
  EXPECT_NE(load_error().find("chat_template.jinja: is a FIFO (named pipe), not a regular file"), std::string::npos);
  fs::remove(dir_ / "chat_template.jinja");
  write("tokenizer_config.json", "{\"chat_template\": \"x\", \"d\": " + std::string(100000, '[') +
                                     std::string(100000, ']') + "}");
  EXPECT_NE(load_error().find("tokenizer_config.json: JSON nested deeper than 64 levels"), std::string::npos);
}

TEST_F(ChatTemplateLoader, EveryFixtureLoadsAsAnOverride) {
  const fs::path fixtures = fs::path(HYDRAGEN_TEST_FIXTURES) / "chat";
  write("tokenizer_config.json", Json{{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}}.dump());
  int n = 0;
  for (const auto& entry : fs::directory_iterator(fixtures)) {
    if (entry.path().extension() != ".jinja") continue;
    const ChatTemplateSource s = load_chat_template(dir_.string(), entry.path().string());
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(s.source, text) << entry.path();
    EXPECT_EQ(s.bos_token, "<|begin_of_text|>");
    ++n;
  }
  EXPECT_GE(n, 10);
}

}  // namespace
}  // namespace hydragen::chat
