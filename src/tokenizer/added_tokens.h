// Added tokens of tokenizer.json ("added_tokens"): text matched before the model runs, so that
// "<|eot_id|>" in the input becomes its id instead of being cut into pieces. Matching is
// leftmost-longest; tokens with normalized=false match the raw input, the others the
// normalized pieces. lstrip/rstrip take the whitespace beside a match into the token;
// single_word skips matches inside a word.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/components.h"

namespace hydragen::tok {

struct AddedToken {
  TokenId id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

// A piece of the input: either text for the model or one added token.
struct Segment {
  std::string text;
  std::optional<TokenId> token;
  bool at_origin = false;  // starts at byte 0 of the input
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // added_tokens: the JSON array. normalizer (may be null) gives the normalized form of the
  // tokens matched on normalized text.
  AddedVocabulary(const Json& added_tokens, const Normalizer* normalizer);

  // Splits text on raw-matched tokens, normalizes the remaining pieces, then splits those on
  // normalized-matched tokens. Empty text pieces are dropped.
  std::vector<Segment> split(std::string_view text, const Normalizer* normalizer) const;

  const AddedToken* find(TokenId id) const;
  std::optional<TokenId> find(std::string_view content) const;
  TokenId max_id() const { return max_id_; }

 private:
  // Matchers for one of the two passes: the tokens indexed by the first byte of their pattern.
  struct Matcher {
    std::vector<std::string> patterns;
    std::vector<const AddedToken*> tokens;
    std::array<std::vector<int>, 256> by_first_byte;
  };
  void add_pattern(Matcher& m, std::string pattern, const AddedToken* token);
  void split_with(const Matcher& m, Segment piece, std::vector<Segment>& out) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<TokenId, std::size_t> by_id_;
  std::unordered_map<std::string, TokenId> by_content_;
  Matcher raw_, normalized_;
  TokenId max_id_ = -1;
};

}  // namespace hydragen::tok
