// tokenizer.json: the Hugging Face `tokenizers` pipeline with a BPE model.
//   encode: added tokens split the text -> normalizer -> pre-tokenizer -> BPE per word
//           -> post-processor template (BOS) when add_special_tokens
//   decode: ids -> token strings (special ones skipped on request) -> decoder -> text
#include "core/json_reader.h"
#include "core/regular_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/components.h"
#include "tokenizer/utf8.h"

namespace hydragen {

namespace {

using tok::Json;

// post_processor: what encode(add_special_tokens=true) puts around the ids of one text.
struct Template {
  std::vector<TokenId> before, after;
};

void read_template(const Json& j, const std::string& where, Template& out) {
  const Json& single = tok::require_field(j, "single", where);
  HG_CHECK(single.is_array(), where, ".single must be an array");
  const Json& specials = tok::require_field(j, "special_tokens", where);
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const Json& item = single[i];
    const std::string item_where = concat(where, ".single[", i, "]");
    if (item.contains("Sequence")) {
      HG_CHECK(!seen_sequence, item_where, ": a single-text template holds one $A");
      seen_sequence = true;
      continue;
    }
    HG_CHECK(item.contains("SpecialToken"), item_where, " must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    const std::string name = tok::require_string(item["SpecialToken"], "id", item_where + ".SpecialToken");
    const Json& entry = tok::require_field(specials, name.c_str(), where + ".special_tokens");
    const Json& ids = tok::require_field(entry, "ids", concat(where, ".special_tokens.", name));
    HG_CHECK(ids.is_array(), where, ".special_tokens.", name, ".ids must be an array");
    for (const Json& id : ids) {
      HG_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0, where, ".special_tokens.",
               name, ".ids holds ", id.dump(), ", not a token id");
      (seen_sequence ? out.after : out.before).push_back(id.get<TokenId>());
    }
  }
  HG_CHECK(seen_sequence, where, ".single has no {\"Sequence\": {\"id\": \"A\"}}");
}

void read_post_processor(const Json& j, const std::string& where, Template& out) {
  if (j.is_null()) return;
  const std::string type = tok::type_tag(j, where);
  if (type == "TemplateProcessing") return read_template(j, where, out);
  if (type == "ByteLevel") return;  // only adjusts offsets
  if (type == "Sequence") {
    const Json& list = tok::require_field(j, "processors", where);
    HG_CHECK(list.is_array(), where, ".processors must be an array");
    for (std::size_t i = 0; i < list.size(); ++i) {
      read_post_processor(list[i], concat(where, ".processors[", i, "]"), out);
    }
    return;
  }
  fail(where, ".type \"", type, "\" is not supported (supported post-processors: ",
       "TemplateProcessing, ByteLevel, Sequence)");
}

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(const Json& spec)
      : normalizer_(tok::parse_normalizer(spec.value("normalizer", Json()), "normalizer")),
        pre_tokenizer_(tok::parse_pre_tokenizer(spec.value("pre_tokenizer", Json()), "pre_tokenizer")),
        decoder_(tok::parse_decoder(spec.value("decoder", Json()), "decoder")),
        model_(checked_model(spec)),
        added_(spec.value("added_tokens", Json()), normalizer_.get()) {
    HG_CHECK(spec.value("truncation", Json()).is_null(), "truncation is not supported (set it to null)");
    read_post_processor(spec.value("post_processor", Json()), "post_processor", template_);
    for (TokenId id : template_.before) check_id(id, "post_processor");
    for (TokenId id : template_.after) check_id(id, "post_processor");
  }

  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens) const override {
    const std::size_t bad = tok::utf8_invalid_at(text);
    HG_CHECK(bad == std::string_view::npos, "encode: text is not valid UTF-8 (byte ", bad, ")");
    std::vector<TokenId> ids;
    if (add_special_tokens) ids = template_.before;
    for (tok::Segment& segment : added_.split(text, normalizer_.get())) {
      if (segment.token) {
        ids.push_back(*segment.token);
        continue;
      }
      std::vector<tok::Word> words{{std::move(segment.text), segment.at_origin}};
      if (pre_tokenizer_) words = pre_tokenizer_->split(std::move(words));
      for (const tok::Word& w : words) model_.tokenize(w.text, ids);
    }
    if (add_special_tokens) ids.insert(ids.end(), template_.after.begin(), template_.after.end());
    return ids;
  }

  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (TokenId id : ids) {
      HG_CHECK(id >= 0, "decode: token id ", id, " is negative");
      if (id >= vocab_size()) continue;  // past the vocabulary (a model's padded rows): nothing, as in `tokenizers`
      const std::string* text = nullptr;
      if (const tok::AddedToken* added = added_.find(id)) {
        text = &added->content;
      } else {
        text = model_.id_to_token(id);
      }
      if (text == nullptr) continue;  // a hole in the vocabulary: `tokenizers` skips it too
      // As in `tokenizers`, "special" goes by the text: a vocab entry equal to a special
      // added token is skipped as well.
      if (skip_special_tokens) {
        auto as_added = added_.find(*text);
        if (as_added && added_.find(*as_added)->special) continue;
      }
      tokens.push_back(*text);
    }
    std::string out;
    if (!decoder_) {  // `tokenizers` joins with spaces when there is no decoder
      for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
      return out;
    }
    decoder_->decode_chain(tokens);
    for (const std::string& t : tokens) out += t;
    return out;
  }

  std::int64_t vocab_size() const override {
    return std::max<std::int64_t>(model_.id_limit(), added_.max_id() + 1);
  }

  std::optional<TokenId> token_to_id(std::string_view token) const override {
    if (auto id = added_.find(token)) return id;
    return model_.token_to_id(token);
  }

  std::string id_to_token(TokenId id) const override {
    check_id(id, "id_to_token");
    if (const tok::AddedToken* added = added_.find(id)) return added->content;
    const std::string* text = model_.id_to_token(id);
    HG_CHECK(text != nullptr, "id_to_token: id ", id, " has no vocabulary entry");
    return *text;
  }

  bool is_byte_token(TokenId id) const override {
    const tok::AddedToken* added = added_.find(id);
    const std::string* text = added ? &added->content : model_.id_to_token(id);
    return text != nullptr && tok::is_byte_fallback_token(*text);
  }

  bool is_special(TokenId id) const override {
    const tok::AddedToken* added = added_.find(id);
    return added != nullptr && added->special;
  }

 private:
  static const Json& checked_model(const Json& spec) {
    const Json& model = tok::require_field(spec, "model", "tokenizer.json");
    HG_CHECK(model.is_object(), "model must be an object, got ", model.type_name());
    const std::string type = model.contains("type") ? tok::require_string(model, "type", "model")
                                                    : (model.contains("merges") ? "BPE" : "");
    HG_CHECK(type == "BPE", "model.type \"", type, "\" is not supported (supported: BPE; ",
             "WordPiece, WordLevel and Unigram are not)");
    return model;
  }

  void check_id(TokenId id, const char* what) const {
    HG_CHECK(id >= 0 && id < vocab_size(), what, ": token id ", id, " is outside [0, ",
             vocab_size(), ")");
  }

  std::unique_ptr<tok::Normalizer> normalizer_;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tok::Decoder> decoder_;
  tok::BpeModel model_;
  tok::AddedVocabulary added_;
  Template template_;
};

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_from_json(std::string_view json_text, const std::string& source) {
  const Json spec = parse_json(json_text, source, {tok::kMaxTokenizerJsonBytes});
  HG_CHECK(spec.is_object(), source, ": expected a JSON object at the top, got ", spec.type_name());
  try {
    return std::make_unique<HfTokenizer>(spec);
  } catch (const Error& e) {
    fail(source, ": ", e.what());
  } catch (const Json::exception& e) {
    fail(source, ": ", e.what());
  }
}

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::filesystem::path& tokenizer_json) {
  return tokenizer_from_json(read_regular_file(tokenizer_json, tok::kMaxTokenizerJsonBytes), tokenizer_json.string());
}

}  // namespace hydragen
