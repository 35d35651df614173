// The one reader of outside JSON (core/json_reader.h), the regular-file guard under it and the
// UTF-8 helpers of every message: hostile text ends in a hydragen::Error naming the source
// and the byte, whose message is valid UTF-8; FIFOs, directories and devices are refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "core/json_reader.h"
#include "core/regular_file.h"
#include "core/utf8.h"
#include "hydragen/error.h"
#include "test_model_fixtures.h"

namespace hydragen {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string parse_error(std::string_view text, const JsonLimits& limits = {}) {
  try {
    parse_json(text, "src.json", limits);
  } catch (const Error& e) {
    EXPECT_EQ(utf8_invalid_at(e.what()), std::string::npos) << "the message is not valid UTF-8";
    return e.what();
  }
  return "no error";
}

std::string file_error(const std::filesystem::path& path, const JsonLimits& limits = {}) {
  try {
    read_json_file(path, limits);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(JsonReader, ParsesWhatNlohmannParses) {
  const nlohmann::json value = parse_json(R"({"a": [1, 2.5, "x\u00e9"], "b": {"c": null}})", "src.json");
  EXPECT_EQ(value["a"][2], "x\xc3\xa9");
  EXPECT_TRUE(value["b"]["c"].is_null());
  EXPECT_EQ(parse_json("\xEF\xBB\xBF[1]", "src.json"), nlohmann::json::array({1}));  // a BOM is allowed
}

// Nesting past the limit is refused before parsing (what overflowed the stack of recursive
// readers: a request's 100,000-deep "n"), with the byte of the first bracket too deep.
TEST(JsonReader, DepthLimitNamesTheByte) {
  EXPECT_THAT(parse_error(std::string(100000, '[') + std::string(100000, ']')),
              HasSubstr("src.json: JSON nested deeper than 64 levels at byte 64"));
  EXPECT_EQ(parse_error(std::string(64, '[') + std::string(64, ']')), "no error");
  EXPECT_THAT(parse_error(R"({"a": {"b": [{"c": 1}]}})", {1 << 20, 3}), HasSubstr("deeper than 3 levels at byte 13"));
  EXPECT_EQ(parse_error(R"({"a": "[[[[[[[[[[\"[[[["})", {1 << 20, 1}), "no error");  // brackets inside strings
}

TEST(JsonReader, SizeLimit) {
  EXPECT_THAT(parse_error("[" + std::string(2000, ' ') + "]", {1024, 64}),
              HasSubstr("src.json: 2.0 KiB of JSON is more than the limit of 1 KiB"));
}

// Invalid UTF-8 is reported by byte offset (the raw bytes never reach the message), and so
// are syntax errors; typographic quotes around a key are valid UTF-8 but not JSON.
TEST(JsonReader, InvalidUtf8AndSyntaxErrorsNameTheByte) {
  EXPECT_THAT(parse_error("{\"a\": \"\xff\"}"), HasSubstr("src.json: invalid UTF-8 at byte 7"));
  EXPECT_THAT(parse_error("{\"a\": \"\xe2\x82\"}"), HasSubstr("invalid UTF-8 at byte 7"));
  EXPECT_THAT(parse_error("{\xe2\x80\x9cn\xe2\x80\x9d: 1}"), HasSubstr("src.json: not valid JSON at byte 1"));
  EXPECT_THAT(parse_error(R"({"a": 1,})"), HasSubstr("not valid JSON at byte 8"));
  EXPECT_THAT(parse_error("[1e400]"), AllOf(HasSubstr("not valid JSON"), HasSubstr("1e400")));
  EXPECT_THAT(parse_error(R"(["\ud800"])"), HasSubstr("not valid JSON"));  // a lone surrogate
  EXPECT_THAT(parse_error(""), HasSubstr("not valid JSON at byte 0"));
}

TEST(JsonReader, FilesAreRegularFilesOnly) {
  test::ScratchDir dir("json");
  const auto fifo = dir.path() / "fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(file_error(fifo), HasSubstr("fifo.json: is a FIFO (named pipe), not a regular file"));
  EXPECT_THAT(file_error(dir.path()), HasSubstr(": is a directory, not a regular file"));
  EXPECT_THAT(file_error("/dev/zero"), HasSubstr("/dev/zero: is a character device, not a regular file"));
  EXPECT_THAT(file_error(dir.path() / "missing.json"), HasSubstr("missing.json: cannot open: No such file"));
  std::ofstream(dir.path() / "big.json") << "[" << std::string(5000, ' ') << "]";
  EXPECT_THAT(file_error(dir.path() / "big.json", {4096, 64}),
              HasSubstr("big.json: 4.9 KiB is more than the 4 KiB this file may have"));
  std::ofstream(dir.path() / "ok.json") << R"({"x": 1})";
  EXPECT_EQ(read_json_file(dir.path() / "ok.json")["x"], 1);
}

TEST(JsonReader, ExcerptsAreShortAndValid) {
  const nlohmann::json long_array = nlohmann::json(std::vector<int>(1000, 7));
  const std::string excerpt = json_excerpt(long_array, 20);
  EXPECT_EQ(excerpt, "[7,7,7,7,7,7,7,7,7,7...");
}

TEST(Utf8, LossyAndExcerpt) {
  EXPECT_EQ(utf8_lossy("ab\xff" "c"), "ab\xEF\xBF\xBD" "c");
  EXPECT_EQ(utf8_invalid_at("ab\xff"), 2u);
  EXPECT_EQ(utf8_excerpt("short"), "short");
  EXPECT_EQ(utf8_excerpt("\xe6\x97\xa5\xe6\x97\xa5\xe6\x97\xa5", 7), "\xe6\x97\xa5\xe6\x97\xa5...");  // cut at a character
  EXPECT_EQ(utf8_excerpt("a\xff", 1), "a...");
}

// Every Error's message is valid UTF-8, whatever bytes of outside input it quotes, so it can
// always be printed or written as JSON.
TEST(Utf8, ErrorMessagesAreAlwaysValid) {
  const Error error(std::string("unknown field \"\xff\xfe\""));
  EXPECT_STREQ(error.what(), "unknown field \"\xEF\xBF\xBD\xEF\xBF\xBD\"");
}

}  // namespace
}  // namespace hydragen
