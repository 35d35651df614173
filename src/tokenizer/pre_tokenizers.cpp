// Pre-tokenizers of tokenizer.json: they cut normalized text into the words BPE sees.
// Llama 3: Sequence[Split(regex, Isolated), ByteLevel(use_regex=false)]; GPT-2: ByteLevel with
// its own regex; newer Llama 2 conversions: Metaspace.
#include <algorithm>

#include "tokenizer/components.h"
#include "tokenizer/regex.h"

namespace hydragen::tok {

namespace {

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

SplitBehavior parse_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  fail(where, ".behavior \"", name, "\" is not one of Removed, Isolated, MergedWithPrevious, ",
       "MergedWithNext, Contiguous");
}

struct Span {
  std::size_t begin, end;
  bool delimiter;
};

// Cuts word at the given delimiter matches (sorted, non-overlapping) as `tokenizers` does;
// empty pieces are dropped. Only the first piece can keep at_origin.
void split_word(const Word& word, const std::vector<std::pair<std::size_t, std::size_t>>& matches,
                bool invert, SplitBehavior behavior, std::vector<Word>& out) {
  std::vector<Span> spans;
  std::size_t pos = 0;
  for (auto [b, e] : matches) {
    if (b > pos) spans.push_back({pos, b, invert});
    spans.push_back({b, e, !invert});
    pos = e;
  }
  if (pos < word.text.size()) spans.push_back({pos, word.text.size(), invert});

  std::vector<Span> pieces;
  bool previous_delimiter = false;
  switch (behavior) {
    case SplitBehavior::Removed:
      for (const Span& s : spans) {
        if (!s.delimiter) pieces.push_back(s);
      }
      break;
    case SplitBehavior::Isolated:
      pieces = std::move(spans);
      break;
    case SplitBehavior::MergedWithPrevious:  // a delimiter joins the non-delimiter before it
      for (const Span& s : spans) {
        if (s.delimiter && !previous_delimiter && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back(s);
        }
        previous_delimiter = s.delimiter;
      }
      break;
    case SplitBehavior::MergedWithNext:  // a delimiter joins the non-delimiter after it
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->delimiter && !previous_delimiter && !pieces.empty()) {
          pieces.back().begin = it->begin;
        } else {
          pieces.push_back(*it);
        }
        previous_delimiter = it->delimiter;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    case SplitBehavior::Contiguous:  // runs of delimiters become one piece
      for (const Span& s : spans) {
        if (s.delimiter && previous_delimiter && !pieces.empty()) {
          pieces.back().end = s.end;
        } else {
          pieces.push_back(s);
        }
        previous_delimiter = s.delimiter;
      }
      break;
  }
  for (const Span& p : pieces) {
    if (p.end > p.begin) {
      out.push_back({word.text.substr(p.begin, p.end - p.begin), word.at_origin && p.begin == 0});
    }
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(const Json& j, const std::string& where) {
    const Pattern pattern = read_pattern(j, where);
    literal_ = pattern.is_regex ? "" : pattern.text;
    if (pattern.is_regex) regex_ = std::make_unique<Regex>(pattern.text);
    behavior_ = parse_behavior(require_string(j, "behavior", where), where);
    invert_ = optional_field<bool>(j, "invert", false, where);
  }
  // The regex form, for ByteLevel's use_regex and Digits.
  explicit SplitPreTokenizer(const char* regex)
      : regex_(std::make_unique<Regex>(regex)), behavior_(SplitBehavior::Isolated) {}

  std::vector<Word> split(std::vector<Word> words) const override {
    std::vector<Word> out;
    for (const Word& w : words) split_word(w, matches(w.text), invert_, behavior_, out);
    return out;
  }

 private:
  std::vector<std::pair<std::size_t, std::size_t>> matches(const std::string& text) const {
    if (regex_) return regex_->find_all(text);
    std::vector<std::pair<std::size_t, std::size_t>> found;
    if (literal_.empty()) return found;
    for (std::size_t p = text.find(literal_); p != std::string::npos;
         p = text.find(literal_, p + literal_.size())) {
      found.emplace_back(p, p + literal_.size());
    }
    return found;
  }

  std::string literal_;
  std::unique_ptr<Regex> regex_;
  SplitBehavior behavior_;
  bool invert_ = false;
};

// ByteLevel: optional leading space, optional GPT-2 regex split, then each byte becomes its
// printable stand-in character.
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const Json& j, const std::string& where)
      : add_prefix_space_(optional_field<bool>(j, "add_prefix_space", true, where)) {
    if (optional_field<bool>(j, "use_regex", true, where)) {
      regex_split_ = std::make_unique<SplitPreTokenizer>(kGpt2Pattern);
    }
  }
  std::vector<Word> split(std::vector<Word> words) const override {
    if (add_prefix_space_) {
      for (Word& w : words) {
        if (!w.text.empty() && w.text[0] != ' ') w.text = " " + w.text;
      }
    }
    if (regex_split_) words = regex_split_->split(std::move(words));
    for (Word& w : words) {
      std::string mapped;
      mapped.reserve(w.text.size() * 2);
      for (char c : w.text) mapped += byte_to_unicode(static_cast<unsigned char>(c));
      w.text = std::move(mapped);
    }
    return words;
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<SplitPreTokenizer> regex_split_;
};

enum class PrependScheme { Always, First, Never };

PrependScheme parse_prepend_scheme(const Json& j, const std::string& where) {
  if (!j.contains("prepend_scheme")) {  // older files: add_prefix_space
    return optional_field<bool>(j, "add_prefix_space", true, where) ? PrependScheme::Always
                                                                   : PrependScheme::Never;
  }
  const std::string s = require_string(j, "prepend_scheme", where);
  if (s == "always") return PrependScheme::Always;
  if (s == "first") return PrependScheme::First;
  if (s == "never") return PrependScheme::Never;
  fail(where, ".prepend_scheme \"", s, "\" is not one of always, first, never");
}

// Metaspace: spaces become the replacement (▁), which is prepended to the text (always, or
// only at the start of the input), then optionally the text is cut before each ▁.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(const Json& j, const std::string& where)
      : replacement_(require_string(j, "replacement", where)),
        scheme_(parse_prepend_scheme(j, where)),
        split_(optional_field<bool>(j, "split", true, where)) {
    HG_CHECK(!replacement_.empty(), where, ".replacement must not be empty");
  }
  std::vector<Word> split(std::vector<Word> words) const override {
    for (Word& w : words) {
      replace_all(w.text, " ", replacement_);
      const bool prepend = scheme_ == PrependScheme::Always ||
                           (scheme_ == PrependScheme::First && w.at_origin);
      if (prepend && !w.text.empty() && w.text.rfind(replacement_, 0) != 0) {
        w.text = replacement_ + w.text;
      }
    }
    if (!split_) return words;
    std::vector<Word> out;
    for (const Word& w : words) {
      std::vector<std::pair<std::size_t, std::size_t>> hits;
      for (std::size_t p = w.text.find(replacement_); p != std::string::npos;
           p = w.text.find(replacement_, p + replacement_.size())) {
        hits.emplace_back(p, p + replacement_.size());
      }
      split_word(w, hits, false, SplitBehavior::MergedWithNext, out);
    }
    return out;
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  std::vector<Word> split(std::vector<Word> words) const override {
    for (const auto& step : steps_) words = step->split(std::move(words));
    return words;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

}  // namespace

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_tag(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(j, where);
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(j, where);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(j, where);
  if (type == "Digits") {  // numeric characters isolated, one by one or in runs
    const bool individual = optional_field<bool>(j, "individual_digits", false, where);
    return std::make_unique<SplitPreTokenizer>(individual ? R"(\p{N})" : R"(\p{N}+)");
  }
  if (type == "Sequence") {
    return std::make_unique<SequencePreTokenizer>(parse_sequence_steps<PreTokenizer>(j, "pretokenizers", where, parse_pre_tokenizer));
  }
  fail(where, ".type \"", type, "\" is not supported (supported pre-tokenizers: ByteLevel, ",
       "Split, Metaspace, Digits, Sequence)");
}

}  // namespace hydragen::tok
