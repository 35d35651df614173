#include "requests.h"

#include <unistd.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/json_reader.h"
#include "core/regular_file.h"
#include "core/utf8.h"
#include "hydragen/error.h"

namespace hydragen::cli {

namespace {

using nlohmann::json;

// An integer field's value within [lo, hi]; a JSON float or an integer out of range is an
// error of the line (converting it would overflow).
std::int64_t integer_in(const json& value, const char* field, std::int64_t lo, std::int64_t hi) {
  HG_CHECK(value.is_number_integer(), "\"", field, "\" must be an integer, got ", json_excerpt(value));
  const bool fits = value.is_number_unsigned()
                        ? value.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi) &&
                              (lo <= 0 || value.get<std::uint64_t>() >= static_cast<std::uint64_t>(lo))
                        : value.get<std::int64_t>() >= lo && value.get<std::int64_t>() <= hi;
  HG_CHECK(fits, "\"", field, "\" is out of range [", lo, ", ", hi, "]: ", json_excerpt(value));
  return value.is_number_unsigned() ? static_cast<std::int64_t>(value.get<std::uint64_t>()) : value.get<std::int64_t>();
}

std::vector<std::int32_t> ids_of(const json& value, const char* field) {
  HG_CHECK(value.is_array(), "\"", field, "\" must be an array of token ids, got ", json_excerpt(value));
  std::vector<std::int32_t> ids;
  for (const json& id : value) ids.push_back(static_cast<std::int32_t>(integer_in(id, field, 0, INT32_MAX)));
  return ids;
}

std::vector<std::int32_t> encode(const Tokenizer* tokenizer, const std::string& text, bool add_special) {
  HG_CHECK(tokenizer != nullptr, "a text prompt needs a tokenizer, and the model directory (-m) has none "
           "(tokenizer.json or tokenizer.model); give token ids (\"prompt_ids\")");
  return tokenizer->encode(text, add_special);
}

template <class T>
void read_integer(const json& line, const char* field, T& into, std::int64_t lo, std::int64_t hi) {
  if (line.contains(field)) into = static_cast<T>(integer_in(line.at(field), field, lo, hi));
}

void read_float(const json& line, const char* field, float& into) {
  if (!line.contains(field)) return;
  const json& value = line.at(field);
  HG_CHECK(value.is_number(), "\"", field, "\" must be a number, got ", json_excerpt(value));
  const double v = value.get<double>();
  HG_CHECK(std::isfinite(v) && std::fabs(v) <= std::numeric_limits<float>::max(), "\"", field,
           "\" is out of range: ", json_excerpt(value));
  into = static_cast<float>(v);
}

// "stop": one string or a list of them (OpenAI's two forms); none may be empty.
std::vector<std::string> stop_strings_of(const json& stop) {
  HG_CHECK(stop.is_string() || stop.is_array(), "\"stop\" must be a string or an array of strings, got ",
           json_excerpt(stop));
  std::vector<std::string> strings;
  for (const json& item : stop.is_string() ? json::array({stop}) : stop) {
    HG_CHECK(item.is_string(), "\"stop\" must be a string or an array of strings, got ", json_excerpt(item));
    HG_CHECK(!item.get_ref<const std::string&>().empty(), "\"stop\" holds an empty string");
    strings.push_back(item.get<std::string>());
  }
  return strings;
}

void read_prompt(const json& line, const Tokenizer* tokenizer, engine::GenerationRequest& r) {
  const int prompts = line.contains("prompt") + line.contains("prompt_ids") + line.contains("segments") +
                      line.contains("segment_ids");
  HG_CHECK(prompts == 1, "give exactly one of \"prompt\", \"prompt_ids\", \"segments\", \"segment_ids\"");
  r.prompt.clear();
  r.segment_ends.clear();
  if (line.contains("prompt")) {  // text, or token ids as OpenAI's API takes them
    const json& prompt = line["prompt"];
    HG_CHECK(prompt.is_string() || (prompt.is_array() && (prompt.empty() || prompt[0].is_number())),
             "\"prompt\" must be a string or an array of token ids (one prompt per line), got ", json_excerpt(prompt));
    r.prompt = prompt.is_string() ? encode(tokenizer, prompt.get<std::string>(), true) : ids_of(prompt, "prompt");
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
        HG_CHECK(segments[i].is_string(), "\"segments\" must hold strings, got ", json_excerpt(segments[i]));
        ids = encode(tokenizer, segments[i].get<std::string>(), i == 0);  // BOS once, before the first
      } else {
        ids = ids_of(segments[i], "segment_ids");
      }
      r.prompt.insert(r.prompt.end(), ids.begin(), ids.end());
      r.segment_ends.push_back(static_cast<std::int64_t>(r.prompt.size()));
    }
  }
}

// Calls on_line(number, text, too_long) for every line of fd (the '\n' cut off). A line longer
// than max_bytes comes with too_long and no text: its bytes are skipped, never held.
void for_each_line(int fd, const std::string& name, std::uint64_t max_bytes,
                   const std::function<void(std::int64_t, const std::string&, bool)>& on_line) {
  std::string chunk(1 << 20, '\0'), line;
  bool too_long = false;
  std::int64_t number = 1;
  for (;;) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) continue;
    HG_CHECK(got >= 0, name, ": cannot read: ", std::strerror(errno));
    if (got == 0) break;
    std::size_t begin = 0;
    for (;;) {
      const void* newline = std::memchr(chunk.data() + begin, '\n', static_cast<std::size_t>(got) - begin);
      const std::size_t end = newline ? static_cast<const char*>(newline) - chunk.data() : static_cast<std::size_t>(got);
      if (!too_long) {
        if (line.size() + (end - begin) > max_bytes) too_long = true, line.clear(), line.shrink_to_fit();
        else line.append(chunk, begin, end - begin);
      }
      if (!newline) break;
      on_line(number++, line, too_long);
      line.clear();
      too_long = false;
      begin = end + 1;
    }
  }
  if (!line.empty() || too_long) on_line(number, line, too_long);
}

}  // namespace

std::string sampling_range_error(const sample::SamplingParams& params, bool as_flags) {
  try {
    sample::validate(params);  // the sampler's ranges, one definition
    return "";
  } catch (const Error& e) {
    // "SamplingParams: top_p must be ...": the field renamed as the user wrote it.
    std::string message = e.what();
    const std::string prefix = "SamplingParams: ";
    if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
    const std::size_t end = message.find(' ');
    if (end == std::string::npos) return message;
    std::string field = message.substr(0, end);
    if (as_flags) {
      std::replace(field.begin(), field.end(), '_', '-');
      field = "--" + field;
    } else {
      field = "\"" + field + "\"";
    }
    return field + message.substr(end);
  }
}

ParsedRequest parse_request_line(const std::string& text, const engine::GenerationRequest& defaults,
                                 const Tokenizer* tokenizer) {
  ParsedRequest parsed;
  parsed.request = defaults;
  engine::GenerationRequest& r = parsed.request;
  try {
    const json line = parse_json(text, "", {kMaxRequestLineBytes});
    HG_CHECK(line.is_object(), "a request line must be a JSON object, got ", json_excerpt(line));
    static const char* known[] = {"prompt", "prompt_ids", "segments", "segment_ids", "n", "max_new_tokens",
                                  "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
                                  "stop_token_ids", "presence_penalty", "frequency_penalty", "repetition_penalty"};
    for (const auto& [key, value] : line.items()) {
      bool ok = false;
      for (const char* k : known) ok |= key == k;
      HG_CHECK(ok, "unknown field \"", utf8_excerpt(key, 60), "\" (known: prompt, prompt_ids, segments, segment_ids, n, "
               "max_tokens or max_new_tokens, temperature, top_p, top_k, min_p, seed, stop, stop_token_ids, "
               "presence_penalty, frequency_penalty, repetition_penalty)");
    }
    read_prompt(line, tokenizer, r);
    read_integer(line, "n", r.n, 1, 1 << 20);
    HG_CHECK(!(line.contains("max_tokens") && line.contains("max_new_tokens")),
             "give one of \"max_tokens\" and \"max_new_tokens\" (they mean the same)");
    read_integer(line, "max_new_tokens", r.max_new_tokens, 1, INT32_MAX);
    read_integer(line, "max_tokens", r.max_new_tokens, 1, INT32_MAX);
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
               "\"seed\" must be a non-negative integer, got ", json_excerpt(seed));
      r.sampling.seed = seed.get<std::uint64_t>();
    }
    if (line.contains("stop")) r.stop_strings = stop_strings_of(line["stop"]);
    if (line.contains("stop_token_ids")) r.stop_token_ids = ids_of(line["stop_token_ids"], "stop_token_ids");
    const std::string range = sampling_range_error(r.sampling, /*as_flags=*/false);
    HG_CHECK(range.empty(), range);
  } catch (const Error& e) {
    parsed.error = e.what();
  }
  return parsed;
}

std::vector<ParsedRequest> read_requests_jsonl(const std::string& path, const engine::GenerationRequest& defaults,
                                               const Tokenizer* tokenizer) {
  std::optional<RegularFile> file;
  int fd = STDIN_FILENO;
  const std::string name = path == "-" ? "stdin" : path;
  if (path == "-") {
    struct stat info {};
    HG_CHECK(::fstat(fd, &info) == 0, "--requests -: cannot read standard input: ", std::strerror(errno));
    HG_CHECK(!S_ISCHR(info.st_mode) || ::isatty(fd), "--requests -: standard input is a character device (such as ",
             "/dev/zero), not a file, a pipe or a terminal");
  } else {
    try {
      file.emplace(path);
    } catch (const Error& e) {
      fail("--requests: ", e.what());
    }
    fd = file->fd();
  }
  std::vector<ParsedRequest> requests;
  for_each_line(fd, name, kMaxRequestLineBytes, [&](std::int64_t number, const std::string& line, bool too_long) {
    if (!too_long && line.find_first_not_of(" \t\r") == std::string::npos) return;
    ParsedRequest parsed;
    if (too_long) parsed.error = concat("the line is longer than ", bytes_text(kMaxRequestLineBytes));
    else parsed = parse_request_line(line, defaults, tokenizer);
    if (!parsed.error.empty()) parsed.error = name + ":" + std::to_string(number) + ": " + parsed.error;
    parsed.line = number;
    requests.push_back(std::move(parsed));
  });
  return requests;
}

}  // namespace hydragen::cli
