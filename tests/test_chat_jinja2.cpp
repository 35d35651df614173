// Hydragen's chat-template renders against jinja2's, byte for byte: every real template of
// tests/fixtures/chat x every conversation, and the language cases. jinja2_expected.json is
// written by tests/chat/render_with_jinja2.py (jinja2 set up as transformers sets it up); the
// ctest chat.jinja2_expected_is_current fails when it is not what jinja2 renders now.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "chat/openai_messages.h"
#include "chat/template.h"

namespace hydragen::chat {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

fs::path chat_fixtures() { return fs::path(HYDRAGEN_TEST_FIXTURES) / "chat"; }

std::string read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + file.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

OJson read_json(const std::string& name) { return OJson::parse(read_text(chat_fixtures() / name)); }

// The expected file and the inputs it was rendered from, read once.
struct Cases {
  OJson fixtures = read_json("fixtures.json");
  OJson conversations = read_json("conversations.json");
  OJson expected = read_json("jinja2_expected.json");

  static const Cases& get() {
    static const Cases cases;
    return cases;
  }
  const OJson* find(const std::string& id) const {
    for (const OJson& c : expected.at("cases")) {
      if (c.at("id") == id) return &c;
    }
    return nullptr;
  }
};

// strftime_now's time: the "now" of the expected file, "YYYY-MM-DDTHH:MM:SS".
RenderOptions options_at(const std::string& now) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  if (std::sscanf(now.c_str(), "%d-%d-%dT%d:%d:%d", &y, &mo, &d, &h, &mi, &s) != 6) {
    throw std::runtime_error("jinja2_expected.json: \"now\" must be YYYY-MM-DDTHH:MM:SS, got " + now);
  }
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  std::tm copy = tm;
  timegm(&copy);  // fills in the weekday and the day of the year
  tm.tm_wday = copy.tm_wday;
  tm.tm_yday = copy.tm_yday;
  RenderOptions o;
  o.now = [tm] { return tm; };
  return o;
}

// Where two texts first differ, with a little of each around it.
std::string first_difference(const std::string& want, const std::string& got) {
  std::size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const std::size_t from = i < 40 ? 0 : i - 40;
  return "first difference at byte " + std::to_string(i) + "\n  jinja2:   " + OJson(want.substr(from, 120)).dump() +
         "\n  hydragen: " + OJson(got.substr(from, 120)).dump();
}

// Parses (once per source) and renders, and checks the result against the expected case.
void expect_as_jinja2(const OJson& expected, const std::optional<Template>& tpl, const std::string& parse_error,
                      const OJson& context, const RenderOptions& options) {
  const std::string id = expected.at("id").get<std::string>();
  std::optional<std::string> output;
  bool raised = false;
  std::string error = parse_error;
  if (tpl) {
    try {
      output = tpl->render(context, options);
    } catch (const TemplateError& e) {
      raised = e.raised();
      error = raised ? e.message() : e.what();
    }
  }
  if (expected.contains("output")) {
    const std::string want = expected["output"].get<std::string>();
    if (!output) {
      ADD_FAILURE() << id << ": jinja2 renders " << OJson(want.substr(0, 200)).dump() << ", hydragen fails: " << error;
    } else if (*output != want) {
      ADD_FAILURE() << id << ": " << first_difference(want, *output);
    }
  } else if (output) {
    ADD_FAILURE() << id << ": jinja2 fails (" << expected.at("error").get<std::string>() << "), hydragen renders "
                  << OJson(output->substr(0, 200)).dump();
  } else if (expected.at("raised").get<bool>()) {
    EXPECT_TRUE(raised) << id << ": jinja2's raise_exception(" << expected["error"] << "), hydragen: " << error;
    if (raised) EXPECT_EQ(error, expected["error"].get<std::string>()) << id;
  } else {
    EXPECT_FALSE(raised) << id << ": raise_exception in hydragen only: " << error;
  }
}

// One parse of `source`, or the error that refuses it.
std::pair<std::optional<Template>, std::string> parse(const std::string& source) {
  try {
    return {Template::parse(source), ""};
  } catch (const TemplateError& e) {
    return {std::nullopt, e.what()};
  }
}

class RealTemplate : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTemplate, RendersEveryConversationAsJinja2Does) {
  const Cases& cases = Cases::get();
  const OJson* fixture = nullptr;
  for (const OJson& f : cases.fixtures) {
    if (f.at("file") == GetParam()) fixture = &f;
  }
  ASSERT_NE(fixture, nullptr);
  const auto [tpl, parse_error] = parse(read_text(chat_fixtures() / GetParam()));
  ASSERT_TRUE(tpl.has_value()) << "a real template must parse: " << parse_error;
  const RenderOptions options = options_at(cases.expected.at("now").get<std::string>());
  int outputs = 0;
  for (const OJson& conv : cases.conversations) {
    const std::string id = GetParam() + "/" + conv.at("name").get<std::string>();
    const OJson* expected = cases.find(id);
    if (expected == nullptr) {
      ADD_FAILURE() << id << " is not in jinja2_expected.json: run tests/chat/render_with_jinja2.py";
      continue;
    }
    const OJson& messages = conv.at("messages");
    const OJson context = chat_context(conv.value("openai", false) ? template_messages(messages) : messages,
                                       conv.value("tools", OJson()),
                                       conv.value("add_generation_prompt", true), fixture->at("bos_token"),
                                       fixture->at("eos_token"), conv.value("extra", OJson::object()));
    expect_as_jinja2(*expected, tpl, parse_error, context, options);
    outputs += expected->contains("output") ? 1 : 0;
  }
  EXPECT_GE(outputs, 3) << "jinja2 renders too few of the conversations with this template to test it";
}

// The fixture templates; when the files cannot be read, one name that says so (the test then
// fails on it) rather than an exception before main, which would hide every other test.
std::vector<std::string> fixture_files() {
  std::vector<std::string> files;
  try {
    for (const OJson& f : Cases::get().fixtures) files.push_back(f.at("file").get<std::string>());
  } catch (const std::exception& e) {
    files = {std::string("unreadable fixtures: ") + e.what()};
  }
  return files;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param.substr(0, info.param.rfind(".jinja"));
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(ChatTemplateJinja2, RealTemplate, ::testing::ValuesIn(fixture_files()), test_name);

TEST(ChatTemplateJinja2, LanguageCasesRenderAsJinja2Does) {
  const Cases& cases = Cases::get();
  const RenderOptions options = options_at(cases.expected.at("now").get<std::string>());
  int language_cases = 0;
  for (const OJson& c : cases.expected.at("cases")) {
    if (!c.contains("template")) continue;
    ++language_cases;
    const auto [tpl, parse_error] = parse(c["template"].get<std::string>());
    expect_as_jinja2(c, tpl, parse_error, c.at("context"), options);
  }
  EXPECT_GE(language_cases, 100);
}

}  // namespace
}  // namespace hydragen::chat
