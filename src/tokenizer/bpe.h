// The BPE model of tokenizer.json: a vocabulary, ranked merges, and what to do with a
// character the vocabulary lacks (byte fallback to <0xXX> tokens, else the unk token).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/json_util.h"

namespace hydragen::tok {

class BpeModel {
 public:
  // model: the "model" object of tokenizer.json (type BPE). Validates vocab and merges.
  explicit BpeModel(const Json& model);

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<TokenId>& out) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  const std::string* id_to_token(TokenId id) const;  // nullptr when the id has no entry
  std::int64_t id_limit() const { return static_cast<std::int64_t>(id_to_token_.size()); }

 private:
  struct PairHash {
    std::size_t operator()(std::uint64_t key) const { return std::hash<std::uint64_t>()(key); }
  };
  static std::uint64_t pair_key(TokenId a, TokenId b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
           static_cast<std::uint32_t>(b);
  }
  struct Merge {
    std::int32_t rank;
    TokenId merged;
  };
  void load_merges(const Json& merges);
  void merge_all(std::vector<TokenId>& symbols) const;

  struct StringHash {  // lets find() take a string_view without a copy
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> id_to_token_;  // "" for ids without an entry
  std::vector<bool> has_id_;
  std::unordered_map<std::uint64_t, Merge, PairHash> merges_;
  std::optional<TokenId> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  TokenId byte_ids_[256];  // <0xXX> ids, -1 when missing
};

}  // namespace hydragen::tok
