#include "tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"

namespace hydragen::tok {

BpeModel::BpeModel(const Json& model) {
  const std::string where = "model";
  HG_CHECK(optional_field<std::string>(model, "continuing_subword_prefix", "", where).empty(),
           "model.continuing_subword_prefix is not supported (Llama-family BPE has none)");
  HG_CHECK(optional_field<std::string>(model, "end_of_word_suffix", "", where).empty(),
           "model.end_of_word_suffix is not supported (Llama-family BPE has none)");
  HG_CHECK(optional_field<double>(model, "dropout", 0.0, where) == 0.0,
           "model.dropout is not supported at inference (set it to null)");
  fuse_unk_ = optional_field<bool>(model, "fuse_unk", false, where);
  byte_fallback_ = optional_field<bool>(model, "byte_fallback", false, where);
  ignore_merges_ = optional_field<bool>(model, "ignore_merges", false, where);

  const Json& vocab = require_field(model, "vocab", where);
  HG_CHECK(vocab.is_object(), "model.vocab must be an object {token: id}, got ", vocab.type_name());
  TokenId max_id = -1;
  for (const auto& [token, id] : vocab.items()) {
    HG_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                 id.get<std::int64_t>() < (std::int64_t{1} << 30),
             "model.vocab[\"", token, "\"] must be a non-negative integer id, got ", id.dump());
    const auto tid = id.get<TokenId>();
    vocab_.emplace(token, tid);
    max_id = std::max(max_id, tid);
  }
  id_to_token_.assign(static_cast<std::size_t>(max_id + 1), "");
  has_id_.assign(id_to_token_.size(), false);
  for (const auto& [token, id] : vocab_) {
    HG_CHECK(!has_id_[id], "model.vocab: id ", id, " is given to both \"", id_to_token_[id],
             "\" and \"", token, "\"");
    id_to_token_[id] = token;
    has_id_[id] = true;
  }

  const std::string unk = optional_field<std::string>(model, "unk_token", "", where);
  if (!unk.empty()) {
    unk_id_ = token_to_id(unk);
    HG_CHECK(unk_id_.has_value(), "model.unk_token \"", unk, "\" is not in model.vocab");
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[b] = token_to_id(name).value_or(-1);
  }
  load_merges(require_field(model, "merges", where));
}

void BpeModel::load_merges(const Json& merges) {
  HG_CHECK(merges.is_array(), "model.merges must be an array, got ", merges.type_name());
  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      HG_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
               "model.merges[", rank, "] \"", s, "\" must be two tokens separated by one space");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {  // ["a", "b"]
      HG_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
               "model.merges[", rank, "] must be \"a b\" or [\"a\", \"b\"], got ", m.dump());
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    const auto a = token_to_id(left), b = token_to_id(right), ab = token_to_id(left + right);
    HG_CHECK(a.has_value(), "model.merges[", rank, "] references \"", left, "\", not in model.vocab");
    HG_CHECK(b.has_value(), "model.merges[", rank, "] references \"", right, "\", not in model.vocab");
    HG_CHECK(ab.has_value(), "model.merges[", rank, "]: the merged token \"", left + right,
             "\" is not in model.vocab");
    merges_[pair_key(*a, *b)] = Merge{static_cast<std::int32_t>(rank), *ab};  // later wins
  }
}

std::optional<TokenId> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(TokenId id) const {
  if (id < 0 || id >= id_limit() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::tokenize(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {  // a word that is a token stays whole, whatever the merges say
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<TokenId> symbols;
  symbols.reserve(word.size());
  bool unk_pending = false;  // consecutive unknown characters fuse into one unk when fuse_unk
  for (std::size_t i = 0; i < word.size();) {
    const std::size_t len = utf8_char_len(word, i);
    const std::string_view ch = word.substr(i, len);
    i += len;
    if (auto id = token_to_id(ch)) {
      if (unk_pending) symbols.push_back(*unk_id_);
      unk_pending = false;
      symbols.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char c : ch) all_bytes = all_bytes && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        for (char c : ch) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (!unk_id_) continue;  // no unk token: the character is dropped, as in `tokenizers`
    if (unk_pending && !fuse_unk_) symbols.push_back(*unk_id_);
    unk_pending = true;
  }
  if (unk_pending) symbols.push_back(*unk_id_);
  merge_all(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

// Repeatedly merges the adjacent pair of lowest rank (leftmost among equals). A heap of
// candidate pairs over a linked list of symbols; stale candidates are skipped when popped.
void BpeModel::merge_all(std::vector<TokenId>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  if (n < 2) return;
  struct Candidate {
    std::int32_t rank;
    int pos;
    TokenId merged;
  };
  auto later = [](const Candidate& x, const Candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  std::vector<int> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  auto consider = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(pair_key(symbols[pos], symbols[next[pos]]));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.merged});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const int right = next[top.pos];
    auto it = merges_.find(pair_key(symbols[top.pos], symbols[right]));
    if (it == merges_.end() || it->second.merged != top.merged) continue;  // stale
    symbols[top.pos] = top.merged;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    consider(prev[top.pos]);
    consider(top.pos);
  }
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    if (alive[i]) symbols[kept++] = symbols[i];
  }
  symbols.resize(kept);
}

}  // namespace hydragen::tok
