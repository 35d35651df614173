// Every encoding and decoding of the reference fixtures (tests/fixtures/tokenizer/, written by
// scripts/reference/tokenizer.py with `tokenizers` and `sentencepiece`; the demo model's, by
// its training encoder, scripts/demo/bpe.py) must match exactly, and streaming decode must
// reproduce decode without ever emitting a partial character.
#include <gtest/gtest.h>

#include <sstream>

#include "demo_model_fixtures.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace hydragen {
namespace {

using nlohmann::json;

std::string show(const std::vector<TokenId>& ids) {
  std::ostringstream out;
  for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? "," : "") << ids[i];
  return "[" + out.str() + "]";
}

// A tokenizer's folder and the file of what it must give.
struct TokenizerCase {
  std::string name;
  std::filesystem::path dir, expected;
};

void PrintTo(const TokenizerCase& c, std::ostream* os) { *os << c.name; }  // test names, not bytes

TokenizerCase reference_fixture(const std::string& name) {
  return {name, test::tokenizer_fixtures() / name, test::tokenizer_fixtures() / name / "expected.json"};
}

class TokenizerFixture : public ::testing::TestWithParam<TokenizerCase> {
 protected:
  void SetUp() override {
    tokenizer_ = load_tokenizer(GetParam().dir);
    expected_ = test::read_json_file(GetParam().expected);
  }
  std::unique_ptr<Tokenizer> tokenizer_;
  json expected_;
};

TEST_P(TokenizerFixture, EncodeMatchesReference) {
  int failures = 0;
  for (const json& c : expected_["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<TokenId>>();
    const auto ids_special = c["ids_with_special"].get<std::vector<TokenId>>();
    const auto got = tokenizer_->encode(text, false);
    const auto got_special = tokenizer_->encode(text, true);
    if (got != ids || got_special != ids_special) {
      if (++failures <= 8) {
        ADD_FAILURE() << "text " << json(text).dump() << "\n  expected " << show(ids) << "\n  got      "
                      << show(got) << "\n  with special expected " << show(ids_special) << " got "
                      << show(got_special);
      }
    }
  }
  EXPECT_EQ(failures, 0) << "of " << expected_["cases"].size() << " strings";
}

TEST_P(TokenizerFixture, DecodeMatchesReference) {
  int failures = 0;
  auto check = [&](const std::vector<TokenId>& ids, bool skip, const std::string& want) {
    const std::string got = tokenizer_->decode(ids, skip);
    if (got != want && ++failures <= 8) {
      ADD_FAILURE() << "ids " << show(ids) << " skip_special " << skip << "\n  expected "
                    << json(want).dump() << "\n  got      " << json(got).dump();
    }
  };
  for (const json& c : expected_["cases"]) {
    const auto ids = c["ids"].get<std::vector<TokenId>>();
    const auto ids_special = c["ids_with_special"].get<std::vector<TokenId>>();
    check(ids, false, c["decoded"]);
    check(ids_special, false, c["decoded_with_special"]);
    check(ids_special, true, c["decoded_skip_special"]);
  }
  for (const json& r : expected_["random_decodes"]) {
    const auto ids = r["ids"].get<std::vector<TokenId>>();
    check(ids, false, r["text"]);
    check(ids, true, r["text_skip_special"]);
  }
  EXPECT_EQ(failures, 0);
}

// Streams ids one at a time; every piece must be valid UTF-8 and all of them together must
// equal the full decode.
void expect_stream_equals_decode(const Tokenizer& tokenizer, const std::vector<TokenId>& ids,
                                 bool skip, int& failures) {
  StreamDecoder stream(tokenizer, skip);
  std::string streamed;
  bool valid = true;
  for (TokenId id : ids) {
    const std::string piece = stream.push(id);
    valid = valid && tok::utf8_invalid_at(piece) == std::string::npos;
    streamed += piece;
  }
  const std::string tail = stream.flush();
  valid = valid && tok::utf8_invalid_at(tail) == std::string::npos;
  streamed += tail;
  const std::string full = tokenizer.decode(ids, skip);
  if ((streamed != full || !valid) && ++failures <= 8) {
    ADD_FAILURE() << "ids " << show(ids) << " skip_special " << skip << " valid " << valid
                  << "\n  decode " << json(full).dump() << "\n  stream " << json(streamed).dump(-1, ' ', false, json::error_handler_t::replace);
  }
}

TEST_P(TokenizerFixture, StreamDecodeEqualsDecode) {
  int failures = 0;
  for (const json& c : expected_["cases"]) {
    const auto ids = c["ids_with_special"].get<std::vector<TokenId>>();
    expect_stream_equals_decode(*tokenizer_, ids, false, failures);
    expect_stream_equals_decode(*tokenizer_, ids, true, failures);
  }
  for (const json& r : expected_["random_decodes"]) {
    expect_stream_equals_decode(*tokenizer_, r["ids"].get<std::vector<TokenId>>(), false, failures);
  }
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, TokenizerFixture,
                         ::testing::Values(reference_fixture("bytelevel"), reference_fixture("sp_bpe"),
                                           reference_fixture("metaspace"), reference_fixture("spm"), reference_fixture("qwen2"),
                                           TokenizerCase{"demo", test::demo_model_dir(),
                                                         test::demo_fixture_dir() / "tokenizer_expected.json"}),
                         [](const auto& info) { return info.param.name; });

TEST(TokenizerSpecialTokens, FromTokenizerConfig) {
  const auto dir = test::tokenizer_fixtures();
  const auto byte_level = load_tokenizer(dir / "bytelevel");
  const SpecialTokens& b = byte_level->special_tokens();
  ASSERT_TRUE(b.bos_id.has_value());
  EXPECT_EQ(b.bos_token, "<|begin_of_text|>");
  EXPECT_EQ(*b.bos_id, *byte_level->token_to_id("<|begin_of_text|>"));
  ASSERT_EQ(b.eos_ids.size(), 1u);
  EXPECT_EQ(b.eos_token, "<|end_of_text|>");
  EXPECT_TRUE(byte_level->is_special(*b.bos_id));

  for (const char* name : {"sp_bpe", "metaspace", "spm"}) {
    const auto t = load_tokenizer(dir / name);
    EXPECT_EQ(t->special_tokens().bos_id, std::optional<TokenId>(1)) << name;
    EXPECT_EQ(t->special_tokens().eos_ids, std::vector<TokenId>{2}) << name;
    EXPECT_EQ(t->special_tokens().bos_token, "<s>") << name;
    EXPECT_EQ(t->special_tokens().eos_token, "</s>") << name;
  }
}

TEST(TokenizerSpecialTokens, GenerationConfigAddsEosIds) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "hydragen_tok_generation_config";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(test::tokenizer_fixtures() / "bytelevel" / "tokenizer.json", dir / "tokenizer.json");
  std::ofstream(dir / "generation_config.json") << R"({"bos_token_id": 1000, "eos_token_id": [1001, 1002]})";
  std::ofstream(dir / "config.json") << R"({"bos_token_id": 5, "eos_token_id": 1001})";
  const auto t = load_tokenizer(dir);
  EXPECT_EQ(t->special_tokens().bos_id, std::optional<TokenId>(1000));  // generation_config first
  EXPECT_EQ(t->special_tokens().eos_ids, (std::vector<TokenId>{1001, 1002}));
  EXPECT_EQ(t->special_tokens().bos_token, "<|begin_of_text|>");
  EXPECT_EQ(t->special_tokens().eos_token, "<|end_of_text|>");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hydragen
