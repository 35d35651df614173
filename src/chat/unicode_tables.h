// The character data of Python's str (generated into unicode_case_tables.cpp and
// unicode_class_tables.cpp by tests/chat/gen_unicode_tables.py). unicode.h is the interface.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hydragen::chat::unicode_tables {

struct Range {
  char32_t first, last;
};
// cp -> cp + delta for cp in first, first + stride, ..., last. Runs never overlap.
struct CaseRun {
  char32_t first, last;
  std::int32_t stride, delta;
};
// A code point whose mapping is several code points (unused slots are 0).
struct CaseSpecial {
  char32_t cp;
  char32_t to[3];
};

extern const CaseRun kUpperRuns[], kLowerRuns[], kTitleRuns[];
extern const std::size_t kUpperRunsSize, kLowerRunsSize, kTitleRunsSize;
extern const CaseSpecial kUpperSpecials[], kLowerSpecials[], kTitleSpecials[];
extern const std::size_t kUpperSpecialsSize, kLowerSpecialsSize, kTitleSpecialsSize;
extern const Range kCased[], kCaseIgnorable[];
extern const std::size_t kCasedSize, kCaseIgnorableSize;
extern const Range kSpace[], kNotPrintable[], kAlpha[], kDecimal[], kDigit[], kNumeric[];
extern const std::size_t kSpaceSize, kNotPrintableSize, kAlphaSize, kDecimalSize, kDigitSize, kNumericSize;

}  // namespace hydragen::chat::unicode_tables
