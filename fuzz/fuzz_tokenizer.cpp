// libFuzzer target: arbitrary bytes as a tokenizer.json (a file of the user's checkpoint). It
// must either throw hydragen::Error or give a tokenizer that encodes and decodes a few texts
// (ASCII, multi-byte UTF-8, special-token text, empty, long) with every id inside the
// vocabulary, decode only throwing hydragen::Error; anything else (another exception type, a
// sanitizer report) is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "hydragen/error.h"
#include "tokenizer/tokenizer.h"

namespace {

const std::vector<std::string>& texts() {
  static const std::vector<std::string> all = {
      "", " ", "Hello, world!", "def fib(n):\n    return n if n < 2 else fib(n - 1)", "naïve café – 日本語 🙂",
      "<s> </s> <|begin_of_text|><unk>", std::string(300, 'a') + " " + std::string(40, '\n'), "  leading\ttabs  "};
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::unique_ptr<hydragen::Tokenizer> tokenizer;
  try {
    tokenizer = hydragen::tokenizer_from_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz-input");
  } catch (const hydragen::Error&) {
    return 0;  // a clear error is the expected outcome for malformed input
  }
  for (const std::string& text : texts()) {
    std::vector<hydragen::TokenId> ids;
    try {
      ids = tokenizer->encode(text, true);
    } catch (const hydragen::Error&) {
      continue;  // e.g. a vocabulary with no token for some text: refused, not crashed
    }
    for (const hydragen::TokenId id : ids)
      if (id < 0 || id >= tokenizer->vocab_size()) std::abort();
    try {
      const std::string back = tokenizer->decode(ids, false);
      hydragen::StreamDecoder stream(*tokenizer);
      std::string streamed;
      for (const hydragen::TokenId id : ids) streamed += stream.push(id);
      streamed += stream.flush();
      if (streamed != back) std::abort();  // the streaming decoder's promise
    } catch (const hydragen::Error&) {
    }
  }
  return 0;
}
