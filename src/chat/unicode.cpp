#include "chat/unicode.h"

#include <algorithm>

#include "chat/unicode_tables.h"
#include "tokenizer/utf8.h"

namespace hydragen::chat {

namespace ut = unicode_tables;

namespace {

bool in_ranges(const ut::Range* ranges, std::size_t n, char32_t cp) {
  const ut::Range* end = ranges + n;
  const ut::Range* it = std::upper_bound(ranges, end, cp, [](char32_t c, const ut::Range& r) { return c < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

struct CaseTable {
  const ut::CaseRun* runs;
  std::size_t runs_size;
  const ut::CaseSpecial* specials;
  std::size_t specials_size;
};

const CaseTable kUpper{ut::kUpperRuns, ut::kUpperRunsSize, ut::kUpperSpecials, ut::kUpperSpecialsSize};
const CaseTable kLower{ut::kLowerRuns, ut::kLowerRunsSize, ut::kLowerSpecials, ut::kLowerSpecialsSize};
const CaseTable kTitle{ut::kTitleRuns, ut::kTitleRunsSize, ut::kTitleSpecials, ut::kTitleSpecialsSize};

// Appends the full mapping of cp under `table` (cp itself when it has none).
void append_mapped(std::string& out, const CaseTable& table, char32_t cp) {
  if (cp < 0x80 && &table != &kTitle) {  // the common case, without a search
    if (&table == &kUpper && cp >= 'a' && cp <= 'z') cp -= 32;
    if (&table == &kLower && cp >= 'A' && cp <= 'Z') cp += 32;
    out += static_cast<char>(cp);
    return;
  }
  const ut::CaseSpecial* sp_end = table.specials + table.specials_size;
  const ut::CaseSpecial* sp = std::lower_bound(table.specials, sp_end, cp,
                                               [](const ut::CaseSpecial& s, char32_t c) { return s.cp < c; });
  if (sp != sp_end && sp->cp == cp) {
    for (char32_t c : sp->to) {
      if (c != 0) append_utf8(out, c);
    }
    return;
  }
  const ut::CaseRun* end = table.runs + table.runs_size;
  const ut::CaseRun* it = std::upper_bound(table.runs, end, cp, [](char32_t c, const ut::CaseRun& r) { return c < r.first; });
  if (it != table.runs) {
    const ut::CaseRun& r = *(it - 1);
    if (cp <= r.last && (cp - r.first) % static_cast<char32_t>(r.stride) == 0) {
      cp = static_cast<char32_t>(static_cast<std::int64_t>(cp) + r.delta);
    }
  }
  append_utf8(out, cp);
}

bool case_ignorable(char32_t cp) { return in_ranges(ut::kCaseIgnorable, ut::kCaseIgnorableSize, cp); }

// CPython's lower() of one character: U+03A3 becomes final sigma after a cased character
// (case-ignorable ones skipped) when no cased character follows.
void append_lower_at(std::string& out, const std::vector<char32_t>& cps, std::size_t i) {
  if (cps[i] != 0x3A3) {
    append_mapped(out, kLower, cps[i]);
    return;
  }
  std::size_t j = i;
  while (j > 0 && case_ignorable(cps[j - 1])) --j;
  bool final_sigma = j > 0 && py_iscased(cps[j - 1]);
  if (final_sigma) {
    std::size_t k = i + 1;
    while (k < cps.size() && case_ignorable(cps[k])) ++k;
    final_sigma = k == cps.size() || !py_iscased(cps[k]);
  }
  append_utf8(out, final_sigma ? 0x3C2 : 0x3C3);
}

}  // namespace

std::vector<char32_t> code_points(std::string_view text) {
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) cps.push_back(tok::utf8_next(text, i));
  return cps;
}

std::string to_utf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) append_utf8(out, c);
  return out;
}

void append_utf8(std::string& out, char32_t cp) { tok::utf8_append(out, cp); }

std::size_t code_point_count(std::string_view text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

bool py_isspace(char32_t cp) { return in_ranges(ut::kSpace, ut::kSpaceSize, cp); }
bool py_isprintable(char32_t cp) { return !in_ranges(ut::kNotPrintable, ut::kNotPrintableSize, cp); }
bool py_isalpha(char32_t cp) { return in_ranges(ut::kAlpha, ut::kAlphaSize, cp); }
bool py_isdecimal(char32_t cp) { return in_ranges(ut::kDecimal, ut::kDecimalSize, cp); }
bool py_isdigit(char32_t cp) { return in_ranges(ut::kDigit, ut::kDigitSize, cp); }
bool py_isnumeric(char32_t cp) { return in_ranges(ut::kNumeric, ut::kNumericSize, cp); }
bool py_iscased(char32_t cp) { return in_ranges(ut::kCased, ut::kCasedSize, cp); }

namespace {

bool cased_unchanged(std::string_view text, const CaseTable& table) {
  bool any = false;
  for (std::size_t i = 0; i < text.size();) {
    const char32_t c = tok::utf8_next(text, i);
    if (!py_iscased(c)) continue;
    std::string mapped;
    append_mapped(mapped, table, c);
    std::string self;
    append_utf8(self, c);
    if (mapped != self) return false;
    any = true;
  }
  return any;
}

}  // namespace

bool py_islower(std::string_view text) { return cased_unchanged(text, kLower); }
bool py_isupper(std::string_view text) { return cased_unchanged(text, kUpper); }

std::string py_upper(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) append_mapped(out, kUpper, tok::utf8_next(text, i));
  return out;
}

std::string py_lower(std::string_view text) {
  const std::vector<char32_t> cps = code_points(text);
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < cps.size(); ++i) append_lower_at(out, cps, i);
  return out;
}

namespace {

// Title case where a word starts (every run of cased characters when every_word, else the first
// character only), lower case elsewhere: str.title() and str.capitalize().
std::string title_case(std::string_view text, bool every_word) {
  const std::vector<char32_t> cps = code_points(text);
  std::string out;
  out.reserve(text.size());
  bool word_start = true;
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (word_start) {
      append_mapped(out, kTitle, cps[i]);
    } else {
      append_lower_at(out, cps, i);
    }
    word_start = every_word && !py_iscased(cps[i]);
  }
  return out;
}

}  // namespace

std::string py_title(std::string_view text) { return title_case(text, true); }
std::string py_capitalize(std::string_view text) { return title_case(text, false); }

// Upper case goes lower, lower case goes upper; title case and uncased characters stay.
std::string py_swapcase(std::string_view text) {
  const std::vector<char32_t> cps = code_points(text);
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < cps.size(); ++i) {
    std::string self, upper, lower;
    append_utf8(self, cps[i]);
    append_mapped(upper, kUpper, cps[i]);
    append_mapped(lower, kLower, cps[i]);
    if (py_iscased(cps[i]) && upper == self && lower != self) {
      append_lower_at(out, cps, i);
    } else if (py_iscased(cps[i]) && lower == self && upper != self) {
      out += upper;
    } else {
      out += self;
    }
  }
  return out;
}

}  // namespace hydragen::chat
