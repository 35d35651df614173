#include "requests.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "hydragen/error.h"

namespace hydragen::cli {

namespace {

using nlohmann::json;

std::vector<std::int32_t> ids_of(const json& value, const char* field) {
  HG_CHECK(value.is_array(), "\"", field, "\" must be an array of token ids");
  std::vector<std::int32_t> ids;
  for (const json& id : value) {
    HG_CHECK(id.is_number_integer(), "\"", field, "\" holds a non-integer: ", id.dump());
    ids.push_back(id.get<std::int32_t>());
  }
  return ids;
}

std::vector<std::int32_t> encode(const Tokenizer* tokenizer, const std::string& text, bool add_special) {
  HG_CHECK(tokenizer != nullptr, "a text prompt needs the model's tokenizer (-m); use \"prompt_ids\"");
  return tokenizer->encode(text, add_special);
}

template <class T>
void read_field(const json& line, const char* field, T& into) {
  if (!line.contains(field)) return;
  try {
    into = line.at(field).get<T>();
  } catch (const json::exception&) {
    fail("field \"", field, "\" has the wrong type: ", line.at(field).dump());
  }
}

}  // namespace

ParsedRequest parse_request_line(const std::string& text, const engine::GenerationRequest& defaults,
                                 const Tokenizer* tokenizer) {
  ParsedRequest parsed;
  parsed.request = defaults;
  engine::GenerationRequest& r = parsed.request;
  try {
    json line;
    try {
      line = json::parse(text);
    } catch (const json::parse_error& e) {
      fail("not valid JSON: ", e.what());
    }
    HG_CHECK(line.is_object(), "a request line must be a JSON object");
    static const char* known[] = {"prompt", "prompt_ids", "segments", "segment_ids", "n", "max_new_tokens",
                                  "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids"};
    for (const auto& [key, value] : line.items()) {
      bool ok = false;
      for (const char* k : known) ok |= key == k;
      HG_CHECK(ok, "unknown field \"", key, "\"");
    }
    const int prompts = line.contains("prompt") + line.contains("prompt_ids") + line.contains("segments") +
                        line.contains("segment_ids");
    HG_CHECK(prompts == 1, "give exactly one of \"prompt\", \"prompt_ids\", \"segments\", \"segment_ids\"");
    r.prompt.clear();
    r.segment_ends.clear();
    if (line.contains("prompt")) {
      HG_CHECK(line["prompt"].is_string(), "\"prompt\" must be a string");
      r.prompt = encode(tokenizer, line["prompt"].get<std::string>(), true);
    } else if (line.contains("prompt_ids")) {
      r.prompt = ids_of(line["prompt_ids"], "prompt_ids");
    } else {
      const bool text = line.contains("segments");
      const json& segments = line[text ? "segments" : "segment_ids"];
      HG_CHECK(segments.is_array() && !segments.empty(), "\"", text ? "segments" : "segment_ids",
               "\" must be a non-empty array");
      for (std::size_t i = 0; i < segments.size(); ++i) {
        std::vector<std::int32_t> ids;
        if (text) {
          HG_CHECK(segments[i].is_string(), "\"segments\" must hold strings");
          ids = encode(tokenizer, segments[i].get<std::string>(), i == 0);  // BOS once, before the first
        } else {
          ids = ids_of(segments[i], "segment_ids");
        }
        r.prompt.insert(r.prompt.end(), ids.begin(), ids.end());
        r.segment_ends.push_back(static_cast<std::int64_t>(r.prompt.size()));
      }
    }
    read_field(line, "n", r.n);
    read_field(line, "max_new_tokens", r.max_new_tokens);
    read_field(line, "temperature", r.sampling.temperature);
    read_field(line, "top_p", r.sampling.top_p);
    read_field(line, "top_k", r.sampling.top_k);
    read_field(line, "min_p", r.sampling.min_p);
    read_field(line, "seed", r.sampling.seed);
    read_field(line, "stop", r.stop_strings);
    if (line.contains("stop_token_ids")) r.stop_token_ids = ids_of(line["stop_token_ids"], "stop_token_ids");
  } catch (const Error& e) {
    parsed.error = e.what();
  }
  return parsed;
}

std::vector<ParsedRequest> read_requests_jsonl(const std::string& path, const engine::GenerationRequest& defaults,
                                               const Tokenizer* tokenizer) {
  std::ifstream in(path);
  HG_CHECK(in.good(), "--requests: cannot open '", path, "'");
  std::vector<ParsedRequest> requests;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ParsedRequest parsed = parse_request_line(line, defaults, tokenizer);
    if (!parsed.error.empty()) parsed.error = path + ":" + std::to_string(number) + ": " + parsed.error;
    requests.push_back(std::move(parsed));
  }
  return requests;
}

}  // namespace hydragen::cli
