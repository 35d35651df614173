#include "requests.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "hydragen/error.h"

namespace hydragen::cli {

namespace {

using nlohmann::json;

// An integer field's value within [lo, hi]; a JSON float or an integer out of range is an
// error of the line (converting it would overflow).
std::int64_t integer_in(const json& value, const char* field, std::int64_t lo, std::int64_t hi) {
  HG_CHECK(value.is_number_integer(), "\"", field, "\" must be an integer, got ", value.dump());
  const bool fits = value.is_number_unsigned() ? value.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi)
                                               : value.get<std::int64_t>() >= lo && value.get<std::int64_t>() <= hi;
  HG_CHECK(fits, "\"", field, "\" is out of range [", lo, ", ", hi, "]: ", value.dump());
  return value.is_number_unsigned() ? static_cast<std::int64_t>(value.get<std::uint64_t>()) : value.get<std::int64_t>();
}

std::vector<std::int32_t> ids_of(const json& value, const char* field) {
  HG_CHECK(value.is_array(), "\"", field, "\" must be an array of token ids");
  std::vector<std::int32_t> ids;
  for (const json& id : value) ids.push_back(static_cast<std::int32_t>(integer_in(id, field, 0, INT32_MAX)));
  return ids;
}

std::vector<std::int32_t> encode(const Tokenizer* tokenizer, const std::string& text, bool add_special) {
  HG_CHECK(tokenizer != nullptr, "a text prompt needs the model's tokenizer (-m); use \"prompt_ids\"");
  return tokenizer->encode(text, add_special);
}

template <class T>
void read_integer(const json& line, const char* field, T& into, std::int64_t lo, std::int64_t hi) {
  if (line.contains(field)) into = static_cast<T>(integer_in(line.at(field), field, lo, hi));
}

void read_float(const json& line, const char* field, float& into) {
  if (!line.contains(field)) return;
  const json& value = line.at(field);
  HG_CHECK(value.is_number(), "\"", field, "\" must be a number, got ", value.dump());
  const double v = value.get<double>();
  HG_CHECK(std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max(), "\"", field,
           "\" is out of range: ", value.dump());
  into = static_cast<float>(v);
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
    } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e3082
      fail("not valid JSON: ", e.what());
    }
    HG_CHECK(line.is_object(), "a request line must be a JSON object");
    static const char* known[] = {"prompt", "prompt_ids", "segments", "segment_ids", "n", "max_new_tokens",
                                  "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids",
                                  "presence_penalty", "frequency_penalty", "repetition_penalty"};
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
    read_integer(line, "n", r.n, 1, 1 << 20);
    read_integer(line, "max_new_tokens", r.max_new_tokens, 1, INT32_MAX);
    read_float(line, "temperature", r.sampling.temperature);
    read_float(line, "top_p", r.sampling.top_p);
    read_integer(line, "top_k", r.sampling.top_k, 0, INT32_MAX);
    read_float(line, "min_p", r.sampling.min_p);
    read_float(line, "presence_penalty", r.sampling.presence_penalty);
    read_float(line, "frequency_penalty", r.sampling.frequency_penalty);
    read_float(line, "repetition_penalty", r.sampling.repetition_penalty);
    if (line.contains("seed")) {  // any unsigned 64-bit value
      const json& seed = line["seed"];
      HG_CHECK(seed.is_number_unsigned() || (seed.is_number_integer() && seed.get<std::int64_t>() >= 0),
               "\"seed\" must be a non-negative integer, got ", seed.dump());
      r.sampling.seed = seed.get<std::uint64_t>();
    }
    if (line.contains("stop")) {
      const json& stop = line["stop"];
      HG_CHECK(stop.is_array(), "\"stop\" must be an array of strings");
      r.stop_strings.clear();
      for (const json& item : stop) {
        HG_CHECK(item.is_string(), "\"stop\" must be an array of strings, got ", item.dump());
        r.stop_strings.push_back(item.get<std::string>());
      }
    }
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
