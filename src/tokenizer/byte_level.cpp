// GPT-2's byte <-> unicode map: printable Latin-1 bytes stand for themselves, the other 68
// bytes take the code points 256, 257, ... in byte order, so every byte is a visible char.
#include <array>
#include <string>

#include "tokenizer/components.h"
#include "tokenizer/utf8.h"

namespace hydragen::tok {

namespace {

bool is_self_mapped(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteMap {
  std::array<std::string, 256> to_unicode;
  std::array<int, 512> to_byte;  // every mapped code point is below 256 + 68
  ByteMap() {
    to_byte.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = is_self_mapped(b) ? static_cast<char32_t>(b) : 256 + extra++;
      utf8_append(to_unicode[b], cp);
      to_byte[cp] = b;
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

const std::string& byte_to_unicode(unsigned char b) { return byte_map().to_unicode[b]; }

int unicode_to_byte(char32_t cp) { return cp < 512 ? byte_map().to_byte[cp] : -1; }

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty() || text.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  for (std::size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(text, pos, hit - pos);
    out += to;
  }
  out.append(text, pos, std::string::npos);
  text = std::move(out);
}

}  // namespace hydragen::tok
