// Small pieces of the tokenizer checked directly: lossy UTF-8 as `tokenizers` does it (one
// U+FFFD per maximal invalid subpart), streaming that holds back a split character, and the
// Unicode normal-form normalizers (Qwen's NFC) on strings whose forms differ.
#include <gtest/gtest.h>

#include "tokenizer/components.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

namespace hydragen {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(TokenizerUtf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(tok::utf8_lossy("abc"), "abc");
  EXPECT_EQ(tok::utf8_lossy("a\xC3"), "a" + kFffd);
  EXPECT_EQ(tok::utf8_lossy("\xF0\x9F\x98"), kFffd);                    // truncated emoji: one
  EXPECT_EQ(tok::utf8_lossy("\xF0\x9F\x98" "a"), kFffd + "a");
  EXPECT_EQ(tok::utf8_lossy("\xE0\x80"), kFffd + kFffd);                // overlong: two
  EXPECT_EQ(tok::utf8_lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);    // surrogate: three
  EXPECT_EQ(tok::utf8_lossy("\xFF\xC3\xA9"), kFffd + "\xC3\xA9");
  EXPECT_EQ(tok::utf8_invalid_at("ok\xF4\x90\x80\x80"), 2u);            // above U+10FFFF
  EXPECT_TRUE(tok::utf8_ends_incomplete("a\xE4\xB8"));
  EXPECT_FALSE(tok::utf8_ends_incomplete("a\xE4\xB8\xAD"));
  EXPECT_FALSE(tok::utf8_ends_incomplete("a\x80"));  // invalid, not incomplete
}

TEST(TokenizerStream, HoldsBackASplitCharacter) {
  const auto t = load_tokenizer(test::tokenizer_fixtures() / "bytelevel");
  const std::string text = "x 龘 y";  // a character the training text lacks: one token per byte
  const auto ids = t->encode(text, false);
  ASSERT_GT(ids.size(), 4u);
  StreamDecoder stream(*t);
  std::string out;
  int empty_pieces = 0;
  for (TokenId id : ids) {
    const std::string piece = stream.push(id);
    EXPECT_EQ(tok::utf8_invalid_at(piece), std::string::npos);
    empty_pieces += piece.empty();
    out += piece;
  }
  out += stream.flush();
  EXPECT_EQ(out, text);
  EXPECT_GE(empty_pieces, 2);  // the first two bytes of 龘 wait for the third
}

// A decoder that strips more than one leading character (Strip start = 2, found by
// fuzz_tokenizer): the streamed pieces still add up to the full decode. A context of one
// emitted token (" ") was stripped together with the new token's space.
TEST(TokenizerStream, StripOfSeveralLeadingCharactersKeepsTheStreamExact) {
  const std::string json = R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true, "normalized": false,
                      "lstrip": false, "rstrip": false, "single_word": false}],
    "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
    "pre_tokenizer": null,
    "post_processor": null,
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 2, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": false,
              "vocab": {"<unk>": 0, "\u2581": 1, "a": 2, "b": 3, "\u2581a": 4},
              "merges": ["\u2581 a"]}
  })";
  const auto t = tokenizer_from_json(json, "strip-2");
  for (const std::string text : {"  a  b   a", "a a", "   ", " b", "ab  "}) {
    const auto ids = t->encode(text, false);
    StreamDecoder stream(*t);
    std::string out;
    for (TokenId id : ids) out += stream.push(id);
    out += stream.flush();
    EXPECT_EQ(out, t->decode(ids, false)) << "[" << text << "]";
  }
}

TEST(TokenizerEncode, SpecialTokenTextBecomesTheToken) {
  const auto t = load_tokenizer(test::tokenizer_fixtures() / "sp_bpe");
  const auto ids = t->encode("<s>hi</s>", false);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(t->encode("", true), std::vector<TokenId>{1});
  EXPECT_EQ(t->decode(ids, true), "hi");
}

std::string normalized(const char* type, std::string text) {
  const auto normalizer = tok::parse_normalizer(tok::Json{{"type", type}}, "normalizer");
  normalizer->normalize(text);
  return text;
}

TEST(TokenizerNormalizer, UnicodeNormalForms) {
  const std::string decomposed = "e\xCC\x81", composed = "\xC3\xA9";  // e + U+0301, U+00E9
  EXPECT_EQ(normalized("NFC", "caf" + decomposed), "caf" + composed);
  EXPECT_EQ(normalized("NFD", "caf" + composed), "caf" + decomposed);
  EXPECT_EQ(normalized("NFC", "\xEF\xAC\x81"), "\xEF\xAC\x81");  // the ligature fi: compatibility only
  EXPECT_EQ(normalized("NFKC", "\xEF\xAC\x81" + decomposed), "fi" + composed);
  EXPECT_EQ(normalized("NFKD", "\xEF\xAC\x81" + composed), "fi" + decomposed);
  // Hangul syllables compose from their jamo; a NUL byte inside the text is kept.
  EXPECT_EQ(normalized("NFC", "\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");
  EXPECT_EQ(normalized("NFC", std::string("a\0b", 3)), std::string("a\0b", 3));
  EXPECT_EQ(normalized("NFC", ""), "");
}

}  // namespace
}  // namespace hydragen
