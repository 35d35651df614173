// Normalizers of tokenizer.json. Llama 2 / CodeLlama use Sequence[Prepend("▁"),
// Replace(" " -> "▁")]; Qwen2 / Qwen2.5 / Qwen3 use NFC. The Unicode normal forms come from
// utf8proc (Debian's libutf8proc-dev), the same algorithm as tokenizers' unicode-normalization.
#include <utf8proc.h>

#include <cstdlib>

#include "hydragen/error.h"
#include "tokenizer/components.h"
#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace hydragen::tok {

Replacer::Replacer(const Json& j, const std::string& where)
    : pattern_(read_pattern(j, where)), content_(require_string(j, "content", where)) {
  if (pattern_.is_regex) regex_ = std::make_unique<Regex>(pattern_.text);
}

Replacer::~Replacer() = default;

void Replacer::apply(std::string& text) const {
  if (!regex_) {
    replace_all(text, pattern_.text, content_);
    return;
  }
  std::string out;
  std::size_t pos = 0;
  for (auto [begin, end] : regex_->find_all(text)) {
    out.append(text, pos, begin - pos);
    out += content_;
    pos = end;
  }
  out.append(text, pos, std::string::npos);
  text = std::move(out);
}

namespace {

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);  // empty pieces stay empty
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(const Json& j, const std::string& where) : replacer_(j, where) {}
  void normalize(std::string& text) const override { replacer_.apply(text); }

 private:
  Replacer replacer_;
};

// Strip: removes Unicode whitespace on the left and/or right.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    std::size_t begin = 0, end = text.size();
    if (left_) {
      for (std::size_t i = 0; i < text.size() && is_unicode_whitespace(utf8_next(text, i));) begin = i;
    }
    if (right_) {
      end = begin;  // the end of the last non-space character
      for (std::size_t i = begin; i < text.size();) {
        if (!is_unicode_whitespace(utf8_next(text, i))) end = i;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

// NFC, NFD, NFKC, NFKD. The text is valid UTF-8 (checked at encode); NUL bytes are kept,
// since the length is passed rather than relying on a terminator.
class UnicodeFormNormalizer final : public Normalizer {
 public:
  UnicodeFormNormalizer(utf8proc_option_t options, std::string name) : options_(options), name_(std::move(name)) {}
  void normalize(std::string& text) const override {
    if (text.empty()) return;
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t length =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                     &mapped, options_);
    HG_CHECK(length >= 0, "tokenizer normalizer ", name_, ": ", utf8proc_errmsg(length));
    text.assign(reinterpret_cast<const char*>(mapped), static_cast<std::size_t>(length));
    std::free(mapped);
  }

 private:
  utf8proc_option_t options_;
  std::string name_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_tag(j, where);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(require_string(j, "prepend", where));
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(j, where);
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(optional_field<bool>(j, "strip_left", true, where),
                                             optional_field<bool>(j, "strip_right", true, where));
  }
  constexpr auto kStable = UTF8PROC_STABLE;
  if (type == "NFC") return std::make_unique<UnicodeFormNormalizer>(utf8proc_option_t(kStable | UTF8PROC_COMPOSE), type);
  if (type == "NFD") return std::make_unique<UnicodeFormNormalizer>(utf8proc_option_t(kStable | UTF8PROC_DECOMPOSE), type);
  if (type == "NFKC") {
    return std::make_unique<UnicodeFormNormalizer>(utf8proc_option_t(kStable | UTF8PROC_COMPOSE | UTF8PROC_COMPAT), type);
  }
  if (type == "NFKD") {
    return std::make_unique<UnicodeFormNormalizer>(utf8proc_option_t(kStable | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT),
                                                   type);
  }
  if (type == "Sequence") {
    return std::make_unique<SequenceNormalizer>(parse_sequence_steps<Normalizer>(j, "normalizers", where, parse_normalizer));
  }
  fail(where, ".type \"", type, "\" is not supported (supported normalizers: Prepend, Replace, ",
       "Strip, NFC, NFD, NFKC, NFKD, Sequence)");
}

}  // namespace hydragen::tok
