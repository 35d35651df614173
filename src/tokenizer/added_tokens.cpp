#include "tokenizer/added_tokens.h"

#include "tokenizer/utf8.h"

namespace hydragen::tok {

namespace {

// Start of the last character of s[0, end).
std::size_t previous_char(std::string_view s, std::size_t end) {
  std::size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

bool ends_with_word(std::string_view s, std::size_t end) {
  if (end == 0) return false;
  std::size_t i = previous_char(s, end);
  return is_word_char(utf8_next(s, i));
}

bool starts_with_word(std::string_view s, std::size_t begin) {
  return begin < s.size() && is_word_char(utf8_next(s, begin));
}

// Start of the whitespace run that ends at `end`.
std::size_t whitespace_before(std::string_view s, std::size_t end) {
  while (end > 0) {
    const std::size_t start = previous_char(s, end);
    std::size_t i = start;
    if (!is_unicode_whitespace(utf8_next(s, i))) break;
    end = start;
  }
  return end;
}

// End of the whitespace run that starts at `begin`.
std::size_t whitespace_after(std::string_view s, std::size_t begin) {
  for (std::size_t i = begin; i < s.size();) {
    if (!is_unicode_whitespace(utf8_next(s, i))) break;
    begin = i;
  }
  return begin;
}

}  // namespace

AddedVocabulary::AddedVocabulary(const Json& added_tokens, const Normalizer* normalizer) {
  if (added_tokens.is_null()) return;
  HG_CHECK(added_tokens.is_array(), "added_tokens must be an array, got ", added_tokens.type_name());
  tokens_.reserve(added_tokens.size());
  for (std::size_t i = 0; i < added_tokens.size(); ++i) {
    const Json& j = added_tokens[i];
    const std::string where = concat("added_tokens[", i, "]");
    const Json& id = require_field(j, "id", where);
    HG_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                 id.get<std::int64_t>() < (std::int64_t{1} << 30),
             where, ".id must be a non-negative integer, got ", id.dump());
    AddedToken t;
    t.id = id.get<TokenId>();
    t.content = require_string(j, "content", where);
    t.special = optional_field<bool>(j, "special", false, where);
    t.single_word = optional_field<bool>(j, "single_word", false, where);
    t.lstrip = optional_field<bool>(j, "lstrip", false, where);
    t.rstrip = optional_field<bool>(j, "rstrip", false, where);
    t.normalized = optional_field<bool>(j, "normalized", !t.special, where);
    HG_CHECK(utf8_invalid_at(t.content) == std::string::npos, where, ".content is not valid UTF-8");
    if (t.content.empty()) continue;
    max_id_ = std::max(max_id_, t.id);
    tokens_.push_back(std::move(t));
  }
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    by_id_[tokens_[i].id] = i;
    by_content_.emplace(tokens_[i].content, tokens_[i].id);
  }
  // `tokenizers` matches the special tokens first, then the others; the order breaks ties.
  for (bool special : {true, false}) {
    for (const AddedToken& t : tokens_) {
      if (t.special != special) continue;
      if (!t.normalized) {
        add_pattern(raw_, t.content, &t);
      } else {
        std::string pattern = t.content;
        if (normalizer) normalizer->normalize(pattern);
        add_pattern(normalized_, std::move(pattern), &t);
      }
    }
  }
}

void AddedVocabulary::add_pattern(Matcher& m, std::string pattern, const AddedToken* token) {
  if (pattern.empty()) return;
  m.by_first_byte[static_cast<unsigned char>(pattern[0])].push_back(static_cast<int>(m.patterns.size()));
  m.patterns.push_back(std::move(pattern));
  m.tokens.push_back(token);
}

const AddedToken* AddedVocabulary::find(TokenId id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<TokenId> AddedVocabulary::find(std::string_view content) const {
  auto it = by_content_.find(std::string(content));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

std::vector<Segment> AddedVocabulary::split(std::string_view text, const Normalizer* normalizer) const {
  std::vector<Segment> first;
  split_with(raw_, Segment{std::string(text), std::nullopt, true}, first);
  std::vector<Segment> out;
  for (Segment& s : first) {
    if (s.token) {
      out.push_back(std::move(s));
      continue;
    }
    if (normalizer) normalizer->normalize(s.text);
    split_with(normalized_, std::move(s), out);
  }
  return out;
}

// Leftmost-longest, non-overlapping matches; the search resumes after each raw match (also
// after one discarded by single_word), as `tokenizers`' Aho-Corasick iteration does.
void AddedVocabulary::split_with(const Matcher& m, Segment piece, std::vector<Segment>& out) const {
  if (piece.token) {
    out.push_back(std::move(piece));
    return;
  }
  const std::string& s = piece.text;
  auto push_text = [&](std::size_t begin, std::size_t end) {
    if (end > begin) out.push_back({s.substr(begin, end - begin), std::nullopt, piece.at_origin && begin == 0});
  };
  std::size_t emitted = 0;  // s[0, emitted) is already in out
  std::size_t pos = 0;
  while (!m.patterns.empty() && pos < s.size()) {
    int best = -1;
    std::size_t at = pos;
    for (; at < s.size() && best < 0; ++at) {
      for (int idx : m.by_first_byte[static_cast<unsigned char>(s[at])]) {
        const std::string& p = m.patterns[idx];
        if ((best < 0 || p.size() > m.patterns[best].size()) && s.compare(at, p.size(), p) == 0) best = idx;
      }
      if (best >= 0) break;
    }
    if (best < 0) break;
    std::size_t start = at, stop = at + m.patterns[best].size();
    pos = stop;
    const AddedToken& token = *m.tokens[best];
    if (token.single_word && (ends_with_word(s, start) || starts_with_word(s, stop))) continue;
    if (token.lstrip) start = std::max(whitespace_before(s, start), emitted);
    if (token.rstrip) stop = whitespace_after(s, stop);
    push_text(emitted, start);
    out.push_back({s.substr(start, stop - start), token.id, piece.at_origin && start == 0});
    emitted = stop;
  }
  push_text(emitted, s.size());
}

}  // namespace hydragen::tok
