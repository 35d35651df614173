#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "hydragen/error.h"

namespace hydragen::tok {

namespace {

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  HG_CHECK(code != nullptr, "regex '", pattern, "' does not compile at offset ", offset, ": ",
           pcre2_message(error));
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(as_code(code_)); }

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create_from_pattern(as_code(code_), nullptr));
  std::vector<std::pair<std::size_t, std::size_t>> found;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start <= text.size()) {
    // The caller validated the UTF-8 once; PCRE2 need not check it again for every match.
    const int rc = pcre2_match(as_code(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                               match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    HG_CHECK(rc >= 0, "regex '", pattern_, "': matching failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match.get());
    std::size_t begin = ov[0], end = ov[1];
    if (end == begin) {
      // An empty match: skip one character so that the search moves on.
      if (begin >= text.size()) break;
      std::size_t next = begin + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      start = next;
      continue;
    }
    found.emplace_back(begin, end);
    start = end;
  }
  return found;
}

bool Regex::matches_at_start(std::string_view text) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create_from_pattern(as_code(code_), nullptr));
  const int rc = pcre2_match(as_code(code_), reinterpret_cast<PCRE2_SPTR>(text.data()),
                             text.size(), 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK, match.get(),
                             nullptr);
  return rc >= 0;
}

}  // namespace hydragen::tok
