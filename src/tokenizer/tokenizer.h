// Text <-> token ids for Llama-family models. One interface, two implementations:
// tokenizer.json (Hugging Face `tokenizers` BPE: byte-level or SentencePiece-style with byte
// fallback) and tokenizer.model (libsentencepiece). load_tokenizer(model_dir) picks one and
// reads BOS/EOS from the config files next to it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hydragen {

using TokenId = std::int32_t;

// From tokenizer_config.json (bos_token / eos_token), generation_config.json and config.json
// (bos_token_id / eos_token_id, an id or a list), in that order of preference.
struct SpecialTokens {
  std::optional<TokenId> bos_id;
  std::vector<TokenId> eos_ids;  // every id that ends generation; the first is the primary
  std::string bos_token;         // their text, "" when unknown
  std::string eos_token;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Matches Hugging Face `tokenizer.encode(text, add_special_tokens=...)`. text must be valid
  // UTF-8. Special-token text inside `text` becomes the special token.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special_tokens) const = 0;
  // Matches `tokenizer.decode(ids, skip_special_tokens=...)`; incomplete or invalid UTF-8 from
  // byte tokens becomes U+FFFD as there. An id past the vocabulary decodes to nothing (as
  // there: a model's vocabulary is often padded past its tokenizer's); a negative id throws.
  virtual std::string decode(std::span<const TokenId> ids, bool skip_special_tokens) const = 0;

  virtual std::int64_t vocab_size() const = 0;  // largest id + 1, added tokens included
  virtual std::optional<TokenId> token_to_id(std::string_view token) const = 0;
  virtual std::string id_to_token(TokenId id) const = 0;  // the raw vocabulary entry
  virtual bool is_special(TokenId id) const = 0;
  // A byte-fallback token <0xXX>: its text depends on the byte tokens around it.
  virtual bool is_byte_token(TokenId id) const = 0;

  const SpecialTokens& special_tokens() const { return special_; }
  void set_special_tokens(SpecialTokens special) { special_ = std::move(special); }

 private:
  SpecialTokens special_;
};

// model_dir holds tokenizer.json (preferred) or tokenizer.model, and optionally
// tokenizer_config.json, generation_config.json, config.json.
std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);
// BOS/EOS ids from generation_config.json and config.json in model_dir (both optional), each
// below vocab_size; no token text. What a model without a tokenizer stops at.
SpecialTokens config_special_tokens(const std::filesystem::path& model_dir, std::int64_t vocab_size);
// A tokenizer may not make ids the model cannot embed: more tokens than the model's
// vocabulary is an Error naming both (fewer is fine: the model's extra rows decode to nothing).
void check_tokenizer_fits_model(const Tokenizer& tokenizer, std::int64_t model_vocab_size,
                                const std::filesystem::path& model_dir);
// A model folder's tokenizer, checked to fit the model (check_tokenizer_fits_model), or null
// when the folder has neither tokenizer.json nor tokenizer.model.
std::unique_ptr<Tokenizer> load_model_tokenizer(const std::filesystem::path& model_dir, std::int64_t model_vocab_size);
// What generation stops at: the tokenizer's EOS ids, or without one config_special_tokens'.
std::vector<TokenId> model_eos_ids(const std::filesystem::path& model_dir, const Tokenizer* tokenizer,
                                   std::int64_t model_vocab_size);
// One file, no config files read.
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::filesystem::path& tokenizer_json);
// The same from the file's text; `source` names it in errors.
std::unique_ptr<Tokenizer> tokenizer_from_json(std::string_view json_text, const std::string& source);
// add_bos/add_eos: what encode(text, add_special_tokens=true) puts around the text.
std::unique_ptr<Tokenizer> load_sentencepiece_model(const std::filesystem::path& model_file,
                                                    bool add_bos = true, bool add_eos = false);

// Decodes one id at a time for streaming output. Every piece returned is valid UTF-8 and
// never ends inside a character; the concatenation of all pieces and flush() equals
// tokenizer.decode(all ids). A run of byte-fallback tokens (<0xXX>) comes out when the run
// ends, since its decoding depends on the whole run. Keeps a reference to the tokenizer.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(TokenId id);  // the text that became complete, often ""
  std::string flush();           // whatever is held back (then starts over)

 private:
  // Decoded text of the context before read_, from ids_[start] (prefix_ or earlier).
  std::string context(std::size_t& start) const;

  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<TokenId> ids_;
  std::size_t prefix_ = 0;  // ids_[prefix_, read_) were emitted last time; context for the next
  std::size_t read_ = 0;    // ids_[read_, end) are not emitted yet
};

}  // namespace hydragen
