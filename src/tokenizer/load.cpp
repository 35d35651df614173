// load_tokenizer(model_dir): tokenizer.json if present, else tokenizer.model; then BOS/EOS
// from tokenizer_config.json (token text), generation_config.json and config.json (ids).
#include <fstream>

#include <nlohmann/json.hpp>

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
  std::ifstream in(file, std::ios::binary);
  HG_CHECK(in.good(), "tokenizer: cannot open ", file.string());
  try {
    Json j = Json::parse(in);
    HG_CHECK(j.is_object(), file.string(), ": expected a JSON object at the top");
    return j;
  } catch (const Json::exception& e) {
    fail(file.string(), ": malformed JSON: ", e.what());
  }
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
             file.string(), ": ", key, " holds ", id.dump(), ", not a token id below the vocabulary size ",
             vocab_size);
    ids.push_back(id.get<TokenId>());
  }
  return ids;
}

void add_unique(std::vector<TokenId>& ids, TokenId id) {
  if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

SpecialTokens read_special_tokens(const Tokenizer& tokenizer, const fs::path& dir,
                                  const Json& tokenizer_config) {
  const fs::path tc_file = dir / "tokenizer_config.json";
  const fs::path gen_file = dir / "generation_config.json";
  const fs::path cfg_file = dir / "config.json";
  const Json generation = read_optional_json(gen_file);
  const Json config = read_optional_json(cfg_file);
  const std::int64_t n = tokenizer.vocab_size();

  SpecialTokens s;
  auto known = [&](const std::string& text) -> std::optional<TokenId> {
    return text.empty() ? std::nullopt : tokenizer.token_to_id(text);
  };
  const std::string bos_text = tok::token_text(tokenizer_config, "bos_token", tc_file.string());
  const std::string eos_text = tok::token_text(tokenizer_config, "eos_token", tc_file.string());
  s.bos_id = known(bos_text);
  for (const auto& [json, file] : {std::pair{&generation, gen_file}, std::pair{&config, cfg_file}}) {
    const auto bos = token_ids(*json, "bos_token_id", file, n);
    if (!s.bos_id && !bos.empty()) s.bos_id = bos.front();
  }
  if (auto eos = known(eos_text)) s.eos_ids.push_back(*eos);
  for (const auto& [json, file] : {std::pair{&generation, gen_file}, std::pair{&config, cfg_file}}) {
    for (TokenId id : token_ids(*json, "eos_token_id", file, n)) add_unique(s.eos_ids, id);
  }
  if (s.bos_id) s.bos_token = tokenizer.id_to_token(*s.bos_id);
  if (!s.eos_ids.empty()) s.eos_token = tokenizer.id_to_token(s.eos_ids.front());
  return s;
}

}  // namespace

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
