// Broken tokenizer files and bad arguments give a hydragen::Error that names the problem,
// never a crash.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hydragen/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace hydragen {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A scratch model dir per test; the base tokenizer.json is the SentencePiece-style fixture.
class TokenizerErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hydragen_tok_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    base_ = test::read_json_file(test::tokenizer_fixtures() / "sp_bpe" / "tokenizer.json");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }

  // Expects load_tokenizer(dir_) to throw an Error whose message contains every part.
  void expect_load_error(std::initializer_list<std::string> parts) {
    try {
      load_tokenizer(dir_);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }

  fs::path dir_;
  json base_;
};

TEST_F(TokenizerErrors, MalformedJsonNamesTheFile) {
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, )");
  expect_load_error({"tokenizer.json", "not valid JSON at byte 45"});
}

TEST_F(TokenizerErrors, UnknownModelType) {
  base_["model"]["type"] = "Unigram";
  write("tokenizer.json", base_.dump());
  expect_load_error({"model.type", "Unigram", "BPE"});
}

TEST_F(TokenizerErrors, MergeWithUnknownToken) {
  base_["model"]["merges"].push_back("nosuch ▁t");
  write("tokenizer.json", base_.dump());
  expect_load_error({"model.merges[", "nosuch", "not in model.vocab"});
}

TEST_F(TokenizerErrors, MergedTokenNotInVocab) {
  base_["model"]["merges"].push_back(json::array({"<0x41>", "<0x42>"}));
  write("tokenizer.json", base_.dump());
  expect_load_error({"model.merges[", "<0x41><0x42>"});
}

TEST_F(TokenizerErrors, MalformedMerge) {
  base_["model"]["merges"].push_back(42);
  write("tokenizer.json", base_.dump());
  expect_load_error({"model.merges["});
}

TEST_F(TokenizerErrors, MissingVocab) {
  base_["model"].erase("vocab");
  write("tokenizer.json", base_.dump());
  expect_load_error({"model.vocab is missing"});
}

TEST_F(TokenizerErrors, BadVocabId) {
  base_["model"]["vocab"]["▁t"] = "seven";
  write("tokenizer.json", base_.dump());
  expect_load_error({"model.vocab[", "▁t"});
}

TEST_F(TokenizerErrors, MissingModel) {
  base_.erase("model");
  write("tokenizer.json", base_.dump());
  expect_load_error({"model is missing"});
}

TEST_F(TokenizerErrors, UnsupportedNormalizer) {
  base_["normalizer"] = json{{"type", "Lowercase"}};
  write("tokenizer.json", base_.dump());
  expect_load_error({"normalizer.type", "Lowercase", "NFC"});
}

TEST_F(TokenizerErrors, UnsupportedPreTokenizerInsideSequence) {
  base_["pre_tokenizer"] = json{{"type", "Sequence"},
                                {"pretokenizers", json::array({json{{"type", "Whitespace"}}})}};
  write("tokenizer.json", base_.dump());
  expect_load_error({"pre_tokenizer.pretokenizers[0].type", "Whitespace"});
}

TEST_F(TokenizerErrors, UnsupportedDecoder) {
  base_["decoder"] = json{{"type", "WordPiece"}};
  write("tokenizer.json", base_.dump());
  expect_load_error({"decoder.type", "WordPiece"});
}

TEST_F(TokenizerErrors, InvalidSplitRegex) {
  base_["pre_tokenizer"] = json{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  write("tokenizer.json", base_.dump());
  expect_load_error({"regex", "(unclosed"});
}

TEST_F(TokenizerErrors, UnkTokenNotInVocab) {
  base_["model"]["unk_token"] = "<nope>";
  write("tokenizer.json", base_.dump());
  expect_load_error({"unk_token", "<nope>"});
}

TEST_F(TokenizerErrors, TopLevelNotAnObject) {
  write("tokenizer.json", "[1, 2, 3]");
  expect_load_error({"tokenizer.json", "object"});
}

TEST_F(TokenizerErrors, MalformedTokenizerConfig) {
  write("tokenizer.json", base_.dump());
  write("tokenizer_config.json", "{\"bos_token\": ");
  expect_load_error({"tokenizer_config.json", "not valid JSON at byte"});
}

TEST_F(TokenizerErrors, EosIdOutsideVocab) {
  write("tokenizer.json", base_.dump());
  write("generation_config.json", R"({"eos_token_id": [2, 99999]})");
  expect_load_error({"generation_config.json", "eos_token_id", "99999"});
}

TEST_F(TokenizerErrors, NoTokenizerFile) { expect_load_error({"neither tokenizer.json nor tokenizer.model"}); }

TEST_F(TokenizerErrors, CorruptSentencePieceModel) {
  write("tokenizer.model", "this is not a protobuf");
  expect_load_error({"tokenizer.model"});
}

TEST_F(TokenizerErrors, AddBosTokenOfTheWrongTypeNamesTheField) {
  fs::copy_file(test::tokenizer_fixtures() / "spm" / "tokenizer.model", dir_ / "tokenizer.model");
  write("tokenizer_config.json", R"({"add_bos_token": "yes"})");
  expect_load_error({"tokenizer_config.json", "add_bos_token", "wrong type"});
  write("tokenizer_config.json", R"({"add_bos_token": null, "add_eos_token": null})");  // null: the default
  EXPECT_NO_THROW(load_tokenizer(dir_));
}

TEST_F(TokenizerErrors, TruncatedFiles) {  // every prefix of a real file fails cleanly or loads
  const std::string text = base_.dump();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, text.size() / 3, text.size() / 2, text.size() - 1}) {
    write("tokenizer.json", text.substr(0, n));
    EXPECT_THROW(load_tokenizer(dir_), Error) << n;
  }
}

TEST_F(TokenizerErrors, BadArguments) {
  write("tokenizer.json", base_.dump());
  const auto t = load_tokenizer(dir_);
  const std::vector<TokenId> negative{-1};
  EXPECT_THROW(t->decode(negative, false), Error);
  EXPECT_THROW(t->encode("abc\xC3", false), Error);  // truncated UTF-8
  EXPECT_THROW(t->id_to_token(-5), Error);
  StreamDecoder stream(*t);
  EXPECT_THROW(stream.push(-1), Error);
}

// A model's vocabulary is often padded past its tokenizer's (Qwen2: 151,936 rows for 151,665
// tokens), and the model may sample a padding id: it decodes to nothing, as in `tokenizers`,
// in both tokenizer kinds and in the stream decoder, instead of failing the completion.
TEST_F(TokenizerErrors, IdsPastTheVocabularyDecodeToNothing) {
  write("tokenizer.json", base_.dump());
  fs::copy_file(test::tokenizer_fixtures() / "spm" / "tokenizer.model", dir_ / "spm.model");
  const std::unique_ptr<Tokenizer> hf = load_tokenizer(dir_);
  const std::unique_ptr<Tokenizer> spm = load_sentencepiece_model(dir_ / "spm.model");
  for (const Tokenizer* t : {hf.get(), spm.get()}) {
    const std::vector<TokenId> ids = t->encode("the cat", false);
    std::vector<TokenId> padded = ids;
    padded.insert(padded.begin() + 1, static_cast<TokenId>(t->vocab_size()));
    padded.push_back(static_cast<TokenId>(t->vocab_size() + 1000));
    EXPECT_EQ(t->decode(padded, false), t->decode(ids, false));
    EXPECT_FALSE(t->is_byte_token(static_cast<TokenId>(t->vocab_size())));
    EXPECT_FALSE(t->is_special(static_cast<TokenId>(t->vocab_size())));
    StreamDecoder stream(*t);
    std::string streamed;
    for (TokenId id : padded) streamed += stream.push(id);
    EXPECT_EQ(streamed + stream.flush(), t->decode(ids, false));
  }
}

// A tokenizer with more tokens than the model's vocabulary would make ids the model cannot
// embed: an error at load naming both sizes.
TEST_F(TokenizerErrors, TokenizerLargerThanTheModelIsAnError) {
  write("tokenizer.json", base_.dump());
  const auto t = load_tokenizer(dir_);
  EXPECT_NO_THROW(check_tokenizer_fits_model(*t, t->vocab_size(), dir_));
  EXPECT_NO_THROW(check_tokenizer_fits_model(*t, t->vocab_size() + 100, dir_));
  try {
    check_tokenizer_fits_model(*t, t->vocab_size() - 1, dir_);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the tokenizer has " + std::to_string(t->vocab_size()) + " tokens"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vocab_size is " + std::to_string(t->vocab_size() - 1)), std::string::npos);
  }
}

// Nesting deep enough to overflow a recursive reader (10,000 Sequence normalizers in one
// another, about 400 KB) is refused by the JSON reader's depth limit, naming the file.
TEST_F(TokenizerErrors, DeeplyNestedComponentsAreRefused) {
  json inner = json::parse(R"({"type": "Lowercase"})");
  std::string nested = inner.dump();
  for (int i = 0; i < 10000; ++i) nested = R"({"type": "Sequence", "normalizers": [)" + nested + "]}";
  json spec = base_;
  spec.erase("normalizer");
  std::string text = spec.dump();
  text.insert(1, "\"normalizer\": " + nested + ", ");
  write("tokenizer.json", text);
  expect_load_error({"tokenizer.json", "nested deeper than 64 levels at byte"});
  std::string decoders = R"({"type": "Fuse"})";
  for (int i = 0; i < 10000; ++i) decoders = R"({"type": "Sequence", "decoders": [)" + decoders + "]}";
  text = base_.dump();
  text.insert(1, "\"decoder\": " + decoders + ", ");
  write("tokenizer.json", text);
  expect_load_error({"tokenizer.json", "nested deeper than 64 levels"});
}

// The files beside the tokenizer are read as regular files only: a FIFO would block the
// loader and a directory is no file; each is refused by name.
TEST_F(TokenizerErrors, FifosAndDirectoriesAreRefusedByName) {
  write("tokenizer.json", base_.dump());
  ASSERT_EQ(::mkfifo((dir_ / "tokenizer_config.json").c_str(), 0600), 0);
  expect_load_error({"tokenizer_config.json", "is a FIFO (named pipe), not a regular file"});
  fs::remove(dir_ / "tokenizer_config.json");
  fs::create_directory(dir_ / "generation_config.json");
  expect_load_error({"generation_config.json", "is a directory, not a regular file"});
  fs::remove(dir_ / "generation_config.json");
  fs::remove(dir_ / "tokenizer.json");
  ASSERT_EQ(::mkfifo((dir_ / "tokenizer.json").c_str(), 0600), 0);
  expect_load_error({"tokenizer.json: is a FIFO (named pipe), not a regular file"});
  fs::remove(dir_ / "tokenizer.json");
  ASSERT_EQ(::mkfifo((dir_ / "tokenizer.model").c_str(), 0600), 0);
  expect_load_error({"tokenizer.model: is a FIFO (named pipe), not a regular file"});
}

}  // namespace
}  // namespace hydragen
