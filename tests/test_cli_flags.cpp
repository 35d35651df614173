// The CLI's value parsers (tools/cli_parse.h) and `generate`'s flags as the binary registers
// them: every numeric value is checked when parsed, never cast unchecked (an id past int32, a
// size of inf or 1e30G, 0.5 bytes), and a bad value is a UsageError naming the flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli_parse.h"
#include "generate_flags.h"

namespace hydragen::cli {
namespace {

using ::testing::HasSubstr;

template <class F>
std::string usage_error_of(F&& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(CliParse, TokenIdsAreInt32) {
  EXPECT_EQ(parse_token_ids("1, 2,3", "--prompt-ids"), (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(parse_token_ids("2147483647", "--prompt-ids"), (std::vector<std::int32_t>{2147483647}));
  EXPECT_THAT(usage_error_of([] { parse_token_ids("4294967297", "--prompt-ids"); }),
              HasSubstr("--prompt-ids: item 1 ('4294967297') is not a token id"));
  EXPECT_THAT(usage_error_of([] { parse_token_ids("1,4294967298", "--stop-id"); }), HasSubstr("--stop-id: item 2"));
  for (const char* bad : {"", "-1", "1,,2", "1K", "0x10", "99999999999999999999999"})
    EXPECT_THAT(usage_error_of([&] { parse_token_ids(bad, "--prompt-ids"); }), HasSubstr("--prompt-ids")) << bad;
}

TEST(CliParse, SizesAreCheckedBeforeTheCast) {
  EXPECT_EQ(parse_bytes("320K", "--kv-memory"), 320 * 1024);
  EXPECT_EQ(parse_bytes("1.5GiB", "--kv-memory"), 1536ll << 20);
  EXPECT_EQ(parse_bytes("4096", "--kv-memory"), 4096);
  EXPECT_THAT(usage_error_of([] { parse_bytes("inf", "--kv-memory"); }), HasSubstr("--kv-memory: expected a size"));
  EXPECT_THAT(usage_error_of([] { parse_bytes("1e30G", "--kv-memory"); }), HasSubstr("--kv-memory"));
  EXPECT_THAT(usage_error_of([] { parse_bytes("99999999999G", "--kv-memory"); }), HasSubstr("more than 1 PiB"));
  EXPECT_THAT(usage_error_of([] { parse_bytes("0.5", "--kv-memory"); }), HasSubstr("less than one byte"));
  EXPECT_THAT(usage_error_of([] { parse_bytes("0G", "--kv-memory"); }), HasSubstr("less than one byte"));
  EXPECT_THAT(usage_error_of([] { parse_bytes("12X", "--kv-memory"); }), HasSubstr("got '12X'"));
  EXPECT_THAT(usage_error_of([] { parse_bytes("nan", "--kv-memory"); }), HasSubstr("--kv-memory"));
}

TEST(CliParse, NumbersAndCounts) {
  EXPECT_EQ(parse_float("0.7", "--temperature"), 0.7f);
  for (const char* bad : {"nan", "inf", "-inf", "1e39", "", "1.0x", " 1"})
    EXPECT_THAT(usage_error_of([&] { parse_float(bad, "--top-p"); }), HasSubstr("--top-p")) << bad;
  EXPECT_EQ(parse_integer("-3", "--x", -5, 5), -3);
  EXPECT_THAT(usage_error_of([] { parse_integer("6", "--x", -5, 5); }), HasSubstr("--x: expected an integer in [-5, 5]"));
  EXPECT_THAT(usage_error_of([] { parse_integer("-1", "--x", 0, 5); }), HasSubstr("--x"));
  EXPECT_EQ(parse_unsigned("18446744073709551615", "--seed"), 18446744073709551615ull);
  EXPECT_THAT(usage_error_of([] { parse_unsigned("18446744073709551616", "--seed"); }), HasSubstr("--seed"));
  EXPECT_THAT(usage_error_of([] { parse_unsigned("-1", "--seed"); }), HasSubstr("--seed"));
  EXPECT_EQ(parse_count("4K", "--batch"), 4096);
  EXPECT_THAT(usage_error_of([] { parse_count("9999999999999999999K", "--batch"); }), HasSubstr("--batch"));
  EXPECT_THAT(usage_error_of([] { parse_two_level("0:2K", "--two-level"); }), HasSubstr("GROUPS must be at least 1"));
}

// generate's command line, parsed by the flags the binary registers.
struct Parsed {
  GenerateOptions options;
  std::string error;  // "" when parsing and check_generate_flags passed
};

Parsed parse_generate(std::vector<std::string> args) {
  args.insert(args.begin(), {"hydragen", "generate"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  CLI::App app;
  CLI::App* cmd = app.add_subcommand("generate");
  Parsed parsed;
  add_generate_flags(*cmd, parsed.options);
  std::FILE* log = std::tmpfile();
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
    check_generate_flags(parsed.options, log);
  } catch (const UsageError& e) {
    parsed.error = e.what();
  } catch (const CLI::ParseError& e) {
    parsed.error = std::string("CLI11: ") + e.what();
  }
  std::fclose(log);
  return parsed;
}

TEST(GenerateFlags, ValuesAreCheckedWhenParsed) {
  const std::vector<std::string> base{"--random-weights", "tiny", "--prompt-ids", "1,2"};
  auto error_with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return parse_generate(args).error;
  };
  EXPECT_EQ(error_with({}), "");
  EXPECT_THAT(error_with({"--temperature", "-1"}),
              HasSubstr("--temperature must be finite and >= 0 (0 = greedy), got -1"));
  EXPECT_THAT(error_with({"--temperature", "nan"}), HasSubstr("--temperature: expected a finite number"));
  EXPECT_THAT(error_with({"--top-p", "2"}), HasSubstr("--top-p must be in (0, 1]"));
  EXPECT_THAT(error_with({"--top-p", "0"}), HasSubstr("--top-p must be in (0, 1]"));
  EXPECT_THAT(error_with({"--min-p", "1.5"}), HasSubstr("--min-p must be in [0, 1]"));
  EXPECT_THAT(error_with({"--top-k", "-1"}), HasSubstr("--top-k"));
  EXPECT_THAT(error_with({"--presence-penalty", "3"}), HasSubstr("--presence-penalty must be in [-2, 2] (0 = off), got 3"));
  EXPECT_THAT(error_with({"--frequency-penalty", "-2.5"}), HasSubstr("--frequency-penalty must be in [-2, 2]"));
  EXPECT_THAT(error_with({"--repetition-penalty", "0"}), HasSubstr("--repetition-penalty must be finite and > 0"));
  EXPECT_THAT(error_with({"--repetition-penalty", "inf"}), HasSubstr("--repetition-penalty: expected a finite number"));
  EXPECT_THAT(error_with({"--samples", "0"}), HasSubstr("--samples: expected an integer in [1, 1048576]"));
  EXPECT_THAT(error_with({"--max-new-tokens", "0"}), HasSubstr("--max-new-tokens"));
  EXPECT_THAT(error_with({"--page-size", "48"}), HasSubstr("--page-size: expected 16, 32, 64 or 128"));
  EXPECT_THAT(error_with({"--kv-memory", "inf"}), HasSubstr("--kv-memory"));
  EXPECT_THAT(error_with({"--stop-id", "4294967298"}), HasSubstr("--stop-id: item 1"));
  EXPECT_THAT(error_with({"--stop", "\xe6\x97"}), HasSubstr("--stop: '\xEF\xBF\xBD' is not valid UTF-8 (byte 0)"));
  EXPECT_THAT(error_with({"--stop", ""}), HasSubstr("--stop: a stop string may not be empty"));
  EXPECT_THAT(error_with({"--attention", "fast"}), HasSubstr("--attention: unknown attention mode 'fast'"));
  EXPECT_THAT(error_with({"--device", "tpu"}), HasSubstr("--device: expected auto, cpu or cuda"));
  EXPECT_THAT(parse_generate({"--random-weights", "tiny", "--prompt-ids", "4294967297"}).error,
              HasSubstr("--prompt-ids: item 1"));
}

// -n means samples to vLLM and OpenAI users and tokens to llama.cpp users: it is no flag,
// and giving it names both that are.
TEST(GenerateFlags, DashNNamesSamplesAndMaxNewTokens) {
  const Parsed parsed = parse_generate({"--random-weights", "tiny", "--prompt-ids", "1", "-n", "4"});
  EXPECT_THAT(parsed.error, HasSubstr("-n is ambiguous"));
  EXPECT_THAT(parsed.error, HasSubstr("--samples N"));
  EXPECT_THAT(parsed.error, HasSubstr("--max-new-tokens N"));
  const Parsed ok = parse_generate({"--random-weights", "tiny", "--prompt-ids", "1", "--samples", "4",
                                    "--max-new-tokens", "9", "--temperature", "0.5", "--seed", "7"});
  EXPECT_EQ(ok.error, "");
  EXPECT_EQ(ok.options.samples, 4);
  EXPECT_EQ(ok.options.max_new_tokens, 9);
  EXPECT_EQ(ok.options.temperature, 0.5f);
  EXPECT_EQ(ok.options.seed, 7u);
}

TEST(GenerateFlags, PromptSourcesAndTheModel) {
  EXPECT_THAT(parse_generate({"--random-weights", "tiny", "-p", "hi"}).error, HasSubstr("-p needs a tokenizer"));
  EXPECT_THAT(parse_generate({"--random-weights", "tiny"}).error, HasSubstr("give exactly one of -p PROMPT"));
  EXPECT_THAT(parse_generate({"--prompt-ids", "1"}).error, HasSubstr("give exactly one of -m MODEL_DIR"));
  ModelConfig config;
  config.vocab_size = 512, config.max_position_embeddings = 4096;
  GenerateOptions o = parse_generate({"--random-weights", "tiny", "--prompt-ids", "1,600"}).options;
  EXPECT_THAT(usage_error_of([&] { check_against_model(o, config); }),
              HasSubstr("--prompt-ids: id 600 (item 2) is outside the model's vocabulary [0, 512)"));
  o = parse_generate({"--random-weights", "tiny", "--prompt-ids", "1", "--max-new-tokens", "5000"}).options;
  EXPECT_THAT(usage_error_of([&] { check_against_model(o, config); }),
              HasSubstr("--max-new-tokens 5000: the model's context is 4096 positions"));
}

}  // namespace
}  // namespace hydragen::cli
