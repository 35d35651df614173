// tokenizer.model through libsentencepiece, for checkpoints that ship no tokenizer.json.
// Special-token text in the input stays text (SentencePiece does not split on it); BOS/EOS
// are added by encode(add_special_tokens=true) as the model's tokenizer_config asks.
#include <sentencepiece_processor.h>

#include "core/regular_file.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "hydragen/error.h"

namespace hydragen {

namespace {

constexpr std::uint64_t kMaxModelBytes = std::uint64_t{64} << 20;  // real tokenizer.model files: under 5 MB

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::filesystem::path& file, bool add_bos, bool add_eos)
      : add_bos_(add_bos), add_eos_(add_eos) {
    const auto status = processor_.LoadFromSerializedProto(read_regular_file(file, kMaxModelBytes));
    HG_CHECK(status.ok(), file.string(), ": not a SentencePiece model: ", status.ToString());
    HG_CHECK(processor_.GetPieceSize() > 0, file.string(), ": the SentencePiece model is empty");
  }

  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens) const override {
    const std::size_t bad = tok::utf8_invalid_at(text);
    HG_CHECK(bad == std::string_view::npos, "encode: text is not valid UTF-8 (byte ", bad, ")");
    std::vector<int> pieces;
    const auto status = processor_.Encode(std::string(text), &pieces);
    HG_CHECK(status.ok(), "encode: SentencePiece failed: ", status.ToString());
    std::vector<TokenId> ids;
    ids.reserve(pieces.size() + 2);
    if (add_special_tokens && add_bos_ && processor_.bos_id() >= 0) ids.push_back(processor_.bos_id());
    ids.insert(ids.end(), pieces.begin(), pieces.end());
    if (add_special_tokens && add_eos_ && processor_.eos_id() >= 0) ids.push_back(processor_.eos_id());
    return ids;
  }

  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens) const override {
    std::vector<int> kept;
    kept.reserve(ids.size());
    for (TokenId id : ids) {
      HG_CHECK(id >= 0, "decode: token id ", id, " is negative");
      if (id >= vocab_size()) continue;  // past the vocabulary (a model's padded rows): nothing
      if (!(skip_special_tokens && is_special(id))) kept.push_back(id);
    }
    std::string text;
    const auto status = processor_.Decode(kept, &text);
    HG_CHECK(status.ok(), "decode: SentencePiece failed: ", status.ToString());
    return text;
  }

  std::int64_t vocab_size() const override { return processor_.GetPieceSize(); }

  std::optional<TokenId> token_to_id(std::string_view token) const override {
    const int id = processor_.PieceToId(std::string(token));  // unknown pieces give unk's id
    if (id < 0 || processor_.IdToPiece(id) != token) return std::nullopt;
    return id;
  }

  std::string id_to_token(TokenId id) const override {
    check_id(id, "id_to_token");
    return processor_.IdToPiece(id);
  }

  bool is_special(TokenId id) const override { return inside(id) && processor_.IsControl(id); }
  bool is_byte_token(TokenId id) const override { return inside(id) && processor_.IsByte(id); }

 private:
  bool inside(TokenId id) const { return id >= 0 && id < vocab_size(); }
  void check_id(TokenId id, const char* what) const {
    HG_CHECK(id >= 0 && id < vocab_size(), what, ": token id ", id, " is outside [0, ",
             vocab_size(), ")");
  }

  sentencepiece::SentencePieceProcessor processor_;
  bool add_bos_, add_eos_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_model(const std::filesystem::path& model_file,
                                                    bool add_bos, bool add_eos) {
  return std::make_unique<SentencePieceTokenizer>(model_file, add_bos, add_eos);
}

}  // namespace hydragen
