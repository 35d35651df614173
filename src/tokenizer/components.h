// The pipeline stages of tokenizer.json around the BPE model, each parsed from its JSON object:
//   normalizer     rewrites a piece of text (Prepend, Replace, Sequence)
//   pre-tokenizer  cuts it into words (ByteLevel, Split, Metaspace, Digits, Sequence)
//   decoder        turns the tokens of an id sequence back into text (ByteLevel, Replace,
//                  ByteFallback, Fuse, Strip, Metaspace, Sequence)
// An unsupported type is a hydragen::Error naming the field and the supported types.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_util.h"

namespace hydragen::tok {

class Regex;

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// A piece of text between added tokens and its words. at_origin: the piece starts at byte 0
// of the input (Metaspace's prepend_scheme "first" prepends only there).
struct Word {
  std::string text;
  bool at_origin = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual std::vector<Word> split(std::vector<Word> words) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings in place; the caller concatenates what is left.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// where: the JSON path for errors, e.g. "normalizer" or "decoder.decoders[2]".
// A null JSON value gives nullptr (no stage).
std::unique_ptr<Normalizer> parse_normalizer(const Json& j, const std::string& where);
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& j, const std::string& where);
std::unique_ptr<Decoder> parse_decoder(const Json& j, const std::string& where);

// GPT-2's reversible map from bytes to printable characters (space -> 'Ġ', '\n' -> 'Ċ').
const std::string& byte_to_unicode(unsigned char b);  // the character as UTF-8
int unicode_to_byte(char32_t cp);                      // -1 for characters outside the map

// "<0xXX>" (two hex digits): a byte-fallback token; its value goes to *byte when given.
bool is_byte_fallback_token(std::string_view token, unsigned char* byte = nullptr);

// Replaces every occurrence of from (non-empty) with to.
void replace_all(std::string& text, const std::string& from, const std::string& to);

// The Replace step of normalizers and decoders: a literal or regex pattern and its content.
class Replacer {
 public:
  Replacer(const Json& j, const std::string& where);  // {"pattern": ..., "content": ...}
  ~Replacer();
  void apply(std::string& text) const;

 private:
  Pattern pattern_;
  std::string content_;
  std::unique_ptr<class Regex> regex_;
};

}  // namespace hydragen::tok
