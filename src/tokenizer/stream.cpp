// StreamDecoder: decodes a window of recent ids twice, without and with the new id, and emits
// the difference once it no longer ends in U+FFFD (an incomplete character). The window keeps
// the previously emitted ids as context, at least kContextBytes of decoded text of them when
// there are that many, so decoders that strip leading characters (Strip, up to that many) or
// merge byte tokens see the same neighbours as a full decode.
#include "hydragen/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace hydragen {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// A Strip decoder removes up to `start` leading characters of the window's text; with only
// one emitted token (" ") as context it would reach into the new text (fuzz_tokenizer found
// this with start = 2). Real tokenizers strip one.
constexpr std::size_t kContextBytes = 8;

}  // namespace

std::string StreamDecoder::context(std::size_t& start) const {
  const std::span<const TokenId> all(ids_);
  start = prefix_;
  std::string text = tokenizer_.decode(all.subspan(start, read_ - start), skip_special_);
  while (start > 0 && text.size() < kContextBytes) {
    --start;
    text = tokenizer_.decode(all.subspan(start, read_ - start), skip_special_);
  }
  return text;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(TokenId id) {
  HG_CHECK(id >= 0, "StreamDecoder::push: token id ", id, " is negative");
  ids_.push_back(id);
  // A run of byte tokens decodes as a whole (invalid runs become one U+FFFD per byte), so
  // nothing is emitted until the run ends.
  if (tokenizer_.is_byte_token(id)) return "";
  std::size_t start = 0;
  const std::string before = context(start);
  const std::string after = tokenizer_.decode(std::span<const TokenId>(ids_).subspan(start), skip_special_);
  if (after.size() <= before.size() || ends_with(after, tok::kReplacementChar) ||
      after.compare(0, before.size(), before) != 0) {
    return "";  // nothing new, or the last character is not complete yet
  }
  prefix_ = read_;
  read_ = ids_.size();
  return after.substr(before.size());
}

std::string StreamDecoder::flush() {
  std::size_t start = 0;
  const std::string before = context(start);
  const std::string after = tokenizer_.decode(std::span<const TokenId>(ids_).subspan(start), skip_special_);
  ids_.clear();
  prefix_ = read_ = 0;
  // Normally `before` is a prefix of `after`; otherwise emit from the first difference, cut
  // back to a character boundary.
  std::size_t common = 0;
  while (common < before.size() && common < after.size() && before[common] == after[common]) ++common;
  while (common > 0 && common < after.size() && (static_cast<unsigned char>(after[common]) & 0xC0) == 0x80) {
    --common;
  }
  return after.substr(common);
}

}  // namespace hydragen
