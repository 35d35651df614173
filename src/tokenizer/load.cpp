// load_tokenizer(model_dir): tokenizer.json if present, else tokenizer.model; then BOS/EOS
// from tokenizer_config.json (token text), generation_config.json and config.json (ids).
#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "hydragen/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/json_util.h"

namespace hydragen {

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// The parsed file, or null when it does not exist. Malformed JSON is an error naming the file.
Json read_optional_json(const fs::path& file) {
  if (!fs::exists(file)) return Json();
  Json j = read_json_file(file, {tok::kMaxTokenizerConfigBytes});
  HG_CHECK(j.is_object(), file.string(), ": expected a JSON object at the top");
  return j;
}

// An id or a list of ids (eos_token_id in Llama 3 generation configs).
std::vector<TokenId> token_ids(const Json& config, const char* key, const fs::path& file,
                               std::int64_t vocab_size) {
  std::vector<TokenId> ids;
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return ids;
  const Json& v = config[key];
  const Json list = v.is_array() ? v : Json::array({v});
  for (const Json& id : list) {
    HG_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                 id.get<std::int64_t>() < vocab_size,
             file.string(), ": ", key, " holds ", json_excerpt(id), ", not a token id below the vocabulary size ",
             vocab_size);
    ids.push_back(id.get<TokenId>());
  }
  return ids;
}

void add_unique(std::vector<TokenId>& ids, TokenId id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

// Token text from tokenizer_config.json first, then the ids of config_special_tokens.
SpecialTokens read_special_tokens(const Tokenizer& tokenizer, const fs::path& dir, const Json& tokenizer_config) {
  const fs::path tc_file = dir / "tokenizer_config.json";
  const SpecialTokens from_ids = config_special_tokens(dir, tokenizer.vocab_size());
  auto known = [&](const std::string& text) -> std::optional<TokenId> {
    return text.empty() ? std::nullopt : tokenizer.token_to_id(text);
  };
  SpecialTokens s;
  s.bos_id = known(tok::token_text(tokenizer_config, "bos_token", tc_file.string()));
  if (!s.bos_id) s.bos_id = from_ids.bos_id;
  if (auto eos = known(tok::token_text(tokenizer_config, "eos_token", tc_file.string()))) s.eos_ids.push_back(*eos);
  for (TokenId id : from_ids.eos_ids) add_unique(s.eos_ids, id);
  if (s.bos_id) s.bos_token = tokenizer.id_to_token(*s.bos_id);
  if (!s.eos_ids.empty()) s.eos_token = tokenizer.id_to_token(s.eos_ids.front());
  return s;
}

}  // namespace

SpecialTokens config_special_tokens(const fs::path& model_dir, std::int64_t vocab_size) {
  SpecialTokens s;
  for (const fs::path file : {model_dir / "generation_config.json", model_dir / "config.json"}) {
    const Json json = read_optional_json(file);
    const std::vector<TokenId> bos = token_ids(json, "bos_token_id", file, vocab_size);
    if (!s.bos_id && !bos.empty()) s.bos_id = bos.front();
    for (TokenId id : token_ids(json, "eos_token_id", file, vocab_size)) add_unique(s.eos_ids, id);
  }
  return s;
}

void check_tokenizer_fits_model(const Tokenizer& tokenizer, std::int64_t model_vocab_size, const fs::path& model_dir) {
  HG_CHECK(tokenizer.vocab_size() <= model_vocab_size, model_dir.string(), ": the tokenizer has ",
           tokenizer.vocab_size(), " tokens but config.json's vocab_size is ", model_vocab_size,
           ": the model could not embed the tokenizer's ids past ", model_vocab_size - 1,
           " (the tokenizer and the model do not belong together)");
}

std::unique_ptr<Tokenizer> load_model_tokenizer(const fs::path& model_dir, std::int64_t model_vocab_size) {
  if (!fs::exists(model_dir / "tokenizer.json") && !fs::exists(model_dir / "tokenizer.model")) return nullptr;
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(model_dir);
  check_tokenizer_fits_model(*tokenizer, model_vocab_size, model_dir);
  return tokenizer;
}

std::vector<TokenId> model_eos_ids(const fs::path& model_dir, const Tokenizer* tokenizer, std::int64_t model_vocab_size) {
  return tokenizer ? tokenizer->special_tokens().eos_ids : config_special_tokens(model_dir, model_vocab_size).eos_ids;
}

std::unique_ptr<Tokenizer> load_tokenizer(const fs::path& model_dir) {
  HG_CHECK(fs::is_directory(model_dir), "load_tokenizer: ", model_dir.string(), " is not a directory");
  const fs::path tc_file = model_dir / "tokenizer_config.json";
  const Json tokenizer_config = read_optional_json(tc_file);
  std::unique_ptr<Tokenizer> tokenizer;
  if (fs::exists(model_dir / "tokenizer.json")) {
    tokenizer = load_tokenizer_json(model_dir / "tokenizer.json");
  } else if (fs::exists(model_dir / "tokenizer.model")) {
    const bool add_bos = tok::optional_field(tokenizer_config, "add_bos_token", true, tc_file.string());
    const bool add_eos = tok::optional_field(tokenizer_config, "add_eos_token", false, tc_file.string());
    tokenizer = load_sentencepiece_model(model_dir / "tokenizer.model", add_bos, add_eos);
  } else {
    fail("load_tokenizer: ", model_dir.string(), " holds neither tokenizer.json nor tokenizer.model");
  }
  tokenizer->set_special_tokens(read_special_tokens(*tokenizer, model_dir, tokenizer_config));
  return tokenizer;
}

}  // namespace hydragen
