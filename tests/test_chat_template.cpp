// The chat-template interpreter's own contract: what it refuses at parse time (naming the
// construct and line:column), runtime errors with positions, the limits against hostile
// templates and inputs, the refusals where jinja2 would go on, key order, threads. How it
// renders is checked against jinja2's renders in test_chat_jinja2.cpp.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "chat/template.h"

namespace hydragen::chat {
namespace {

using OJson = nlohmann::ordered_json;

// `{}` reads as JSON null here; it stands for the empty context.
std::string render(const std::string& source, const OJson& context = OJson::object(), const RenderOptions& o = {}) {
  return Template::parse(source).render(context.is_null() ? OJson::object() : context, o);
}

// The TemplateError `fn` throws; fails the test when it throws none.
template <class Fn>
TemplateError error_of(Fn fn) {
  try {
    fn();
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no TemplateError";
  return TemplateError("none", 0, 0, false);
}

TemplateError parse_error(const std::string& source) {
  return error_of([&] { Template::parse(source); });
}

TemplateError render_error(const std::string& source, const OJson& context = OJson::object(),
                           const RenderOptions& o = {}) {
  return error_of([&] { render(source, context, o); });
}

TEST(ChatTemplateParse, UnsupportedTagsAreNamedWithTheirPosition) {
  const TemplateError e = parse_error("line one\n  {% extends 'base.html' %}");
  EXPECT_EQ(e.line(), 2);
  EXPECT_EQ(e.column(), 6);
  EXPECT_NE(e.message().find("'extends'"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("line 2:6"), std::string::npos) << e.what();
  for (const char* tag : {"include", "import", "block", "from", "call", "autoescape"}) {
    const TemplateError t = parse_error(std::string("{% ") + tag + " x %}{% end" + tag + " %}");
    EXPECT_NE(t.message().find(std::string("'") + tag + "'"), std::string::npos) << t.what();
  }
}

TEST(ChatTemplateParse, UnknownFiltersTestsAndTagsAreRefused) {
  const TemplateError f = parse_error("{{ x\n | wordwrap(3) }}");
  EXPECT_EQ(f.line(), 2);
  EXPECT_EQ(f.column(), 4);
  EXPECT_NE(f.message().find("no filter named 'wordwrap'"), std::string::npos) << f.what();
  EXPECT_NE(parse_error("{{ x is prime }}").message().find("no test named 'prime'"), std::string::npos);
  EXPECT_NE(parse_error("{% frob %}").message().find("unknown tag 'frob'"), std::string::npos);
  EXPECT_NE(parse_error("{% for x in y recursive %}{% endfor %}").message().find("recursive"), std::string::npos);
  EXPECT_NE(parse_error("{{ 'x' | random }}").message().find("'random'"), std::string::npos);
}

TEST(ChatTemplateParse, SyntaxErrorsPointAtTheProblem) {
  EXPECT_NE(parse_error("{{ 'open").message().find("unterminated string"), std::string::npos);
  EXPECT_NE(parse_error("{% if x %}no end").message().find("never closed"), std::string::npos);
  EXPECT_NE(parse_error("{# comment").message().find("missing end of comment"), std::string::npos);
  EXPECT_NE(parse_error("{{ a $ b }}").message().find("unexpected character '$'"), std::string::npos);
  EXPECT_NE(parse_error("{{ '\\N{BULLET}' }}").message().find("named Unicode escapes"), std::string::npos);
  EXPECT_NE(parse_error("{{ 99999999999999999999 }}").message().find("integer literal too large"), std::string::npos);
  const TemplateError e = parse_error("héllo {{ 1 + }}");
  EXPECT_EQ(e.line(), 1);
  EXPECT_EQ(e.column(), 14);  // columns count characters, not bytes
}

TEST(ChatTemplateParse, NestingIsBounded) {
  const std::string deep = std::string(200, '(') + "1" + std::string(200, ')');
  EXPECT_NE(parse_error("{{ " + deep + " }}").message().find("nested deeper"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 200; ++i) blocks += "{% if true %}";
  EXPECT_NE(parse_error(blocks).message().find("nested deeper"), std::string::npos);
  EXPECT_EQ(render("{{ " + std::string(40, '(') + "7" + std::string(40, ')') + " }}"), "7");
}

TEST(ChatTemplateRender, RuntimeErrorsCarryTheirPosition) {
  const TemplateError e = render_error("ok\n{{ user.name.first }}", OJson{{"user", OJson::object()}});
  EXPECT_EQ(e.line(), 2);
  EXPECT_FALSE(e.raised());
  EXPECT_NE(e.message().find("has no attribute 'name'"), std::string::npos) << e.what();
}

TEST(ChatTemplateRender, RaiseExceptionKeepsTheTemplatesMessage) {
  const TemplateError e = render_error("{% if messages|length == 0 %}{{ raise_exception('No messages!') }}{% endif %}",
                                       OJson{{"messages", OJson::array()}});
  EXPECT_TRUE(e.raised());
  EXPECT_EQ(e.message(), "No messages!");
  EXPECT_EQ(e.line(), 1);
  EXPECT_EQ(e.column(), 33);
}

TEST(ChatTemplateRender, LoopIterationsAreBounded) {
  RenderOptions o;
  o.limits.max_steps = 10'000;
  const TemplateError e = render_error("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", {}, o);
  EXPECT_NE(e.message().find("max_steps"), std::string::npos) << e.what();
  EXPECT_EQ(render("{% for i in range(50) %}{% for j in range(50) %}{% endfor %}{% endfor %}done", {}, o), "done");
}

TEST(ChatTemplateRender, OutputAndStringsAreBounded) {
  RenderOptions o;
  o.limits.max_output_bytes = 1000;
  EXPECT_NE(render_error("{{ 'x' * 5000 }}", {}, o).message().find("output limit"), std::string::npos);
  EXPECT_NE(render_error("{% for i in range(600) %}ab{% endfor %}", {}, o).message().find("max_output_bytes"),
            std::string::npos);
  const std::string doubling =
      "{% set ns = namespace(s='ab') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}";
  EXPECT_NE(render_error(doubling, {}, o).message().find("output limit"), std::string::npos);
  EXPECT_NE(render_error("{{ 'a'.center(100000) }}", {}, o).message().find("output limit"), std::string::npos);
  EXPECT_NE(render_error("{{ 'aaaa'|replace('a', 'b' * 300) }}", {}, o).message().find("output limit"), std::string::npos);
  RenderOptions items;
  items.limits.max_items = 100;
  EXPECT_NE(render_error("{{ [1, 2] * 1000 }}", {}, items).message().find("limit of 100 items"), std::string::npos);
}

TEST(ChatTemplateRender, MacroRecursionIsBounded) {
  const std::string forever = "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}";
  EXPECT_NE(render_error(forever).message().find("max_call_depth"), std::string::npos);
  const std::string branching = "{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(40) }}";
  EXPECT_NE(render_error(branching).message().find("max_steps"), std::string::npos);
}

TEST(ChatTemplateRender, ContextIsValidatedAndBounded) {
  OJson deep = "leaf";
  for (int i = 0; i < 600; ++i) deep = OJson::array({deep});
  try {
    render("{{ x }}", OJson{{"x", deep}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper than 512"), std::string::npos) << e.what();
  }
  try {
    render("{{ messages }}", OJson{{"messages", OJson::array({OJson{{"content", std::string("bad \xff utf8")}}})}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("messages[0].content: the string is not valid UTF-8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Template::parse("x").render(OJson::array()), Error);
}

TEST(ChatTemplateRender, RefusesWhereItCannotMatchJinja2) {
  // Python's integers are unbounded; a wrong number would be a wrong prompt.
  EXPECT_NE(render_error("{{ 9223372036854775807 + 1 }}").message().find("integer overflow"), std::string::npos);
  // A generator prints as its memory address in Python.
  EXPECT_NE(render_error("{{ [1, 2]|select }}").message().find("memory address"), std::string::npos);
  // Namespaces stay out of containers, so no value can hold itself.
  EXPECT_NE(render_error("{% set ns = namespace() %}{% set ns.self = [ns] %}").message().find("namespace cannot be put"),
            std::string::npos);
  EXPECT_NE(render_error("{{ 'abc'.encode() }}").message().find("not supported"), std::string::npos);
  EXPECT_NE(render_error("{{ strftime_now('%c') }}").message().find("%c is not supported"), std::string::npos);
}

TEST(ChatTemplateRender, StrftimeNowUsesTheInjectedClock) {
  RenderOptions o;
  std::tm tm{};
  tm.tm_year = 2025 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 3;
  tm.tm_wday = 5;
  o.now = [tm] { return tm; };
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y, %A') }}", {}, o), "03 Jan 2025, Friday");
  const std::string today = render("{{ strftime_now('%Y-%m-%d') }}");  // the real clock
  ASSERT_EQ(today.size(), 10u);
  EXPECT_EQ(today[4], '-');
  EXPECT_GE(today.substr(0, 4), "2024");
}

TEST(ChatTemplateRender, OrderedJsonKeepsTheClientsKeyOrder) {
  const std::string source = "{{ tool|tojson }}";
  OJson ordered = OJson::parse(R"({"tool": {"name": "f", "description": "d", "parameters": {}}})");
  EXPECT_EQ(render(source, ordered), R"({"name": "f", "description": "d", "parameters": {}})");
  const nlohmann::json sorted = nlohmann::json::parse(ordered.dump());
  EXPECT_EQ(Template::parse(source).render(sorted), R"({"description": "d", "name": "f", "parameters": {}})");
}

TEST(ChatTemplateRender, OneTemplateRendersFromManyThreads) {
  const Template t = Template::parse(
      "{% for m in messages %}{{ m.role|upper }}: {{ m.content|trim }}{{ '\\n' if not loop.last }}{% endfor %}");
  std::vector<std::string> outputs(8);
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    threads.emplace_back([&, i] {
      OJson messages = OJson::array();
      for (std::size_t k = 0; k <= i; ++k) messages.push_back(OJson{{"role", "user"}, {"content", " m" + std::to_string(k) + " "}});
      for (int rep = 0; rep < 50; ++rep) outputs[i] = t.render(OJson{{"messages", messages}});
    });
  }
  for (auto& th : threads) th.join();
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    std::string expected;
    for (std::size_t k = 0; k <= i; ++k) expected += (k ? "\n" : "") + std::string("USER: m") + std::to_string(k);
    EXPECT_EQ(outputs[i], expected);
  }
}

TEST(ChatTemplateRender, ChatContextIsWhatTransformersPasses) {
  const OJson messages = OJson::array({OJson{{"role", "user"}, {"content", "hi"}}});
  const OJson ctx = chat_context(messages, nullptr, true, "<s>", "</s>", OJson{{"enable_thinking", false}});
  EXPECT_EQ(ctx.dump(),
            R"({"messages":[{"role":"user","content":"hi"}],"tools":null,"documents":null,"add_generation_prompt":true,"bos_token":"<s>","eos_token":"</s>","enable_thinking":false})");
  EXPECT_EQ(render("{{ tools is none }} {{ documents is none }} {{ enable_thinking }}", ctx), "True True False");
  EXPECT_THROW(chat_context(OJson::object(), nullptr, true, "", ""), Error);
  EXPECT_THROW(chat_context(messages, "tools", true, "", ""), Error);
}

}  // namespace
}  // namespace hydragen::chat
