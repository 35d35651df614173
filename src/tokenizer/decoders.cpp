// Decoders of tokenizer.json: from the token strings of an id sequence back to text.
// Llama 3: ByteLevel. Llama 2: Sequence[Replace(▁ -> " "), ByteFallback, Fuse, Strip(" ", 1, 0)].
#include <cctype>

#include "tokenizer/components.h"
#include "tokenizer/utf8.h"

namespace hydragen::tok {

namespace {

// All tokens become one: their characters mapped back to bytes through GPT-2's map (a token
// with a character outside the map keeps its own bytes), then read as lossy UTF-8.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool all_mapped = true;
      for (std::size_t i = 0; i < t.size() && all_mapped;) {
        const int b = unicode_to_byte(utf8_next(t, i));
        all_mapped = b >= 0;
        mapped += static_cast<char>(b);
      }
      bytes += all_mapped ? mapped : t;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(const Json& j, const std::string& where) : replacer_(j, where) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) replacer_.apply(t);
  }

 private:
  Replacer replacer_;
};

// Runs of <0xXX> tokens become their bytes; a run that is not valid UTF-8 becomes one U+FFFD
// per byte (not per invalid sequence, unlike ByteLevel).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string run;
    auto flush_run = [&] {
      if (run.empty()) return;
      if (utf8_invalid_at(run) == std::string::npos) {
        out.push_back(run);
      } else {
        for (std::size_t i = 0; i < run.size(); ++i) out.emplace_back(kReplacementChar);
      }
      run.clear();
    };
    for (std::string& t : tokens) {
      unsigned char byte = 0;
      if (is_byte_fallback_token(t, &byte)) {
        run += static_cast<char>(byte);
      } else {
        flush_run();
        out.push_back(std::move(t));
      }
    }
    flush_run();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder final : public Decoder {
 public:
  StripDecoder(const Json& j, const std::string& where)
      : content_(require_string(j, "content", where)),
        start_(optional_field<std::size_t>(j, "start", 0, where)),
        stop_(optional_field<std::size_t>(j, "stop", 0, where)) {
    std::size_t i = 0;
    HG_CHECK(!content_.empty() && (utf8_next(content_, i), i == content_.size()), where,
             ".content must be one character, got \"", content_, "\"");
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::size_t begin = 0, end = t.size();
      for (std::size_t k = 0; k < start_ && t.compare(begin, content_.size(), content_) == 0 &&
                              begin < end;
           ++k) {
        begin += content_.size();
      }
      for (std::size_t k = 0; k < stop_ && end >= begin + content_.size() &&
                              t.compare(end - content_.size(), content_.size(), content_) == 0;
           ++k) {
        end -= content_.size();
      }
      t = t.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  std::size_t start_, stop_;
};

// Metaspace: ▁ becomes a space, except in the first token, where it is dropped when the
// encoder prepends one (prepend_scheme other than never).
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(const Json& j, const std::string& where)
      : replacement_(require_string(j, "replacement", where)) {
    HG_CHECK(!replacement_.empty(), where, ".replacement must not be empty");
    if (j.contains("prepend_scheme")) {
      drop_in_first_ = require_string(j, "prepend_scheme", where) != "never";
    } else {
      drop_in_first_ = optional_field<bool>(j, "add_prefix_space", true, where);
    }
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      replace_all(tokens[i], replacement_, i == 0 && drop_in_first_ ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  bool drop_in_first_ = true;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

bool is_byte_fallback_token(std::string_view t, unsigned char* byte) {
  const bool is_byte = t.size() == 6 && t.substr(0, 3) == "<0x" && t[5] == '>' &&
                       std::isxdigit(static_cast<unsigned char>(t[3])) &&
                       std::isxdigit(static_cast<unsigned char>(t[4]));
  if (is_byte && byte) *byte = static_cast<unsigned char>(std::stoi(std::string(t.substr(3, 2)), nullptr, 16));
  return is_byte;
}

std::unique_ptr<Decoder> parse_decoder(const Json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_tag(j, where);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(j, where);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return std::make_unique<StripDecoder>(j, where);
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(j, where);
  if (type == "Sequence") {
    return std::make_unique<SequenceDecoder>(parse_sequence_steps<Decoder>(j, "decoders", where, parse_decoder));
  }
  fail(where, ".type \"", type, "\" is not supported (supported decoders: ByteLevel, Replace, ",
       "ByteFallback, Fuse, Strip, Metaspace, Sequence)");
}

}  // namespace hydragen::tok
