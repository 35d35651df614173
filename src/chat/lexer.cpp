#include "chat/lexer.h"

#include <charconv>
#include <cstdlib>

#include "chat/source_position.h"
#include "chat/unicode.h"
#include "tokenizer/utf8.h"

namespace hydragen::chat {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's \s at s[i]: its length in bytes, or 0.
std::size_t space_at(const std::string& s, std::size_t i) {
  if (i >= s.size()) return 0;
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return py_isspace(b) ? 1 : 0;
  std::size_t j = i;
  const char32_t cp = tok::utf8_next(s, j);
  return py_isspace(cp) ? j - i : 0;
}

std::size_t skip_spaces(const std::string& s, std::size_t i) {
  while (std::size_t n = space_at(s, i)) i += n;
  return i;
}

bool all_spaces(const std::string& s, std::size_t from, std::size_t to) {
  while (from < to) {
    const std::size_t n = space_at(s, from);
    if (n == 0) return false;
    from += n;
  }
  return true;
}

// str.rstrip(): the end of s[from, to) without trailing Python whitespace.
std::size_t rstrip_end(const std::string& s, std::size_t from, std::size_t to) {
  std::size_t end = from;
  for (std::size_t i = from; i < to;) {
    const std::size_t n = space_at(s, i);
    if (n == 0) {
      i += tok::utf8_char_len(s, i);
      end = i;
    } else {
      i += n;
    }
  }
  return end;
}

bool starts_with(const std::string& s, std::size_t i, const char* lit) {
  return s.compare(i, std::char_traits<char>::length(lit), lit) == 0;
}

// Digits with single underscores between them ("1_000"); returns the end, or `i` if none.
std::size_t digits_end(const std::string& s, std::size_t i, bool (*digit)(char)) {
  if (i >= s.size() || !digit(s[i])) return i;
  std::size_t j = i + 1;
  while (j < s.size()) {
    if (digit(s[j])) {
      ++j;
    } else if (s[j] == '_' && j + 1 < s.size() && digit(s[j + 1])) {
      j += 2;
    } else {
      break;
    }
  }
  return j;
}

bool dec(char c) { return is_digit(c); }
bool hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool oct(char c) { return c >= '0' && c <= '7'; }
bool bin(char c) { return c == '0' || c == '1'; }

std::string without_underscores(const std::string& s, std::size_t from, std::size_t to) {
  std::string out;
  for (std::size_t i = from; i < to; ++i) {
    if (s[i] != '_') out += s[i];
  }
  return out;
}

// Python's "unicode-escape" decoding of a string literal's body, after non-ASCII characters
// became \x / \u / \U escapes (jinja2 encodes with backslashreplace first).
std::string decode_string_literal(const std::string& body, const std::string& source, std::uint32_t offset) {
  std::string ascii;
  for (std::size_t i = 0; i < body.size();) {
    const auto b = static_cast<unsigned char>(body[i]);
    if (b < 0x80) {
      ascii += body[i++];
      continue;
    }
    const char32_t cp = tok::utf8_next(body, i);
    char buf[16];
    if (cp <= 0xFF) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
    } else if (cp <= 0xFFFF) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
    } else {
      std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(cp));
    }
    ascii += buf;
  }
  std::string out;
  auto hex_escape = [&](std::size_t& i, int width, const char* name) {
    if (i + static_cast<std::size_t>(width) > ascii.size()) fail_at(source, offset, std::string("truncated ") + name + " escape");
    char32_t cp = 0;
    for (int k = 0; k < width; ++k) {
      const char c = ascii[i + static_cast<std::size_t>(k)];
      if (!hex(c)) fail_at(source, offset, std::string("truncated ") + name + " escape");
      cp = cp * 16 + static_cast<char32_t>(is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    i += static_cast<std::size_t>(width);
    if (cp > 0x10FFFF) fail_at(source, offset, "illegal Unicode character");
    if (cp >= 0xD800 && cp < 0xE000) fail_at(source, offset, "a string literal holds a lone surrogate");
    append_utf8(out, cp);
  };
  for (std::size_t i = 0; i < ascii.size();) {
    const char c = ascii[i++];
    if (c != '\\') {
      out += c;
      continue;
    }
    const char e = ascii[i++];  // a literal never ends in a lone backslash
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': hex_escape(i, 2, "\\xXX"); break;
      case 'u': hex_escape(i, 4, "\\uXXXX"); break;
      case 'U': hex_escape(i, 8, "\\UXXXXXXXX"); break;
      case 'N': fail_at(source, offset, "named Unicode escapes (\\N{...}) are not supported");
      default:
        if (oct(e)) {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i < ascii.size() && oct(ascii[i]); ++k) cp = cp * 8 + static_cast<char32_t>(ascii[i++] - '0');
          append_utf8(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : s_(src) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      const std::size_t open = find_tag_start(pos_);
      if (open == std::string::npos) {
        data(pos_, s_.size());
        break;
      }
      const char kind = s_[open + 1];
      const char sign = open + 2 < s_.size() && (s_[open + 2] == '-' || s_[open + 2] == '+') ? s_[open + 2] : 0;
      const std::size_t after = open + 2 + (sign ? 1 : 0);
      if (kind == '%' && raw_begin(open, after, sign)) continue;
      text_before_tag(open, kind, sign);
      pos_ = after;
      if (kind == '#') {
        comment(open);
      } else {
        tag(open, kind == '{');
      }
    }
    tokens_.push_back(Token{Tok::Eof, Op::Add, static_cast<std::uint32_t>(s_.size()), {}});
    return std::move(tokens_);
  }

 private:
  std::size_t find_tag_start(std::size_t from) const {
    for (std::size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void data(std::size_t from, std::size_t to) {
    if (to > from) tokens_.push_back(Token{Tok::Data, Op::Add, static_cast<std::uint32_t>(from), s_.substr(from, to - from)});
  }

  // The text before a tag, with `-` stripping it and lstrip_blocks removing the indentation
  // of a block or comment tag that starts its line.
  void text_before_tag(std::size_t open, char kind, char sign) {
    std::size_t end = open;
    if (sign == '-') {
      end = rstrip_end(s_, pos_, open);
    } else if (sign != '+' && kind != '{') {
      const std::size_t nl = s_.rfind('\n', open == 0 ? 0 : open - 1);
      const std::size_t line_start = nl == std::string::npos || nl < pos_ ? pos_ : nl + 1;
      if ((line_start > pos_ || line_starting_) && line_start < open && all_spaces(s_, line_start, open)) {
        end = line_start;
      }
    }
    data(pos_, end);
    line_starting_ = false;
  }

  // The end of a block or comment tag: "+X}" keeps what follows, "-X}" eats the whitespace
  // after it, "X}" eats one newline (trim_blocks). Returns the position after, or npos.
  std::size_t block_end_at(std::size_t i, char mark) {
    const std::string plain{mark, '}'};
    if (s_[i] == '+' && s_.compare(i + 1, 2, plain) == 0) return i + 3;
    if (s_[i] == '-' && s_.compare(i + 1, 2, plain) == 0) return skip_spaces(s_, i + 3);
    if (s_.compare(i, 2, plain) == 0) return i + 2 < s_.size() && s_[i + 2] == '\n' ? i + 3 : i + 2;
    return std::string::npos;
  }

  void comment(std::size_t open) {
    for (std::size_t i = pos_; i < s_.size(); ++i) {
      const std::size_t end = block_end_at(i, '#');
      if (end != std::string::npos) {
        line_starting_ = end > 0 && s_[end - 1] == '\n';
        pos_ = end;
        return;
      }
    }
    fail_at(s_, static_cast<std::uint32_t>(open), "missing end of comment tag");
  }

  // {% raw %}...{% endraw %}: the body is text. Returns false when the tag is not `raw`.
  bool raw_begin(std::size_t open, std::size_t after, char sign) {
    std::size_t i = skip_spaces(s_, after);
    if (!starts_with(s_, i, "raw")) return false;
    i = skip_spaces(s_, i + 3);
    std::size_t body;
    if (starts_with(s_, i, "-%}")) {
      body = skip_spaces(s_, i + 3);
    } else if (starts_with(s_, i, "%}")) {
      body = i + 2;
    } else {
      return false;
    }
    text_before_tag(open, '%', sign);
    line_starting_ = body > 0 && s_[body - 1] == '\n';
    for (std::size_t j = s_.find("{%", body); j != std::string::npos; j = s_.find("{%", j + 1)) {
      const char end_sign = j + 2 < s_.size() && (s_[j + 2] == '-' || s_[j + 2] == '+') ? s_[j + 2] : 0;
      std::size_t k = skip_spaces(s_, j + 2 + (end_sign ? 1 : 0));
      if (!starts_with(s_, k, "endraw")) continue;
      k = skip_spaces(s_, k + 6);
      const std::size_t end = k < s_.size() ? block_end_at(k, '%') : std::string::npos;
      if (end == std::string::npos) continue;
      pos_ = body;
      text_before_tag(j, '%', end_sign);
      line_starting_ = s_[end - 1] == '\n';
      pos_ = end;
      return true;
    }
    fail_at(s_, static_cast<std::uint32_t>(open), "missing end of raw directive");
  }

  void push(Tok type, std::size_t offset, std::string text = {}) {
    tokens_.push_back(Token{type, Op::Add, static_cast<std::uint32_t>(offset), std::move(text)});
  }

  void tag(std::size_t open, bool variable) {
    push(variable ? Tok::VarBegin : Tok::BlockBegin, open);
    std::vector<char> brackets;
    while (true) {
      if (pos_ >= s_.size()) {
        fail_at(s_, static_cast<std::uint32_t>(open), variable ? "unexpected end of template: '}}' expected"
                                                               : "unexpected end of template: '%}' expected");
      }
      if (brackets.empty()) {
        std::size_t end = std::string::npos;
        if (variable) {
          if (starts_with(s_, pos_, "-}}")) end = skip_spaces(s_, pos_ + 3);
          else if (starts_with(s_, pos_, "}}")) end = pos_ + 2;
        } else {
          end = block_end_at(pos_, '%');
        }
        if (end != std::string::npos) {
          push(variable ? Tok::VarEnd : Tok::BlockEnd, pos_);
          line_starting_ = s_[end - 1] == '\n';
          pos_ = end;
          return;
        }
      }
      if (const std::size_t n = space_at(s_, pos_)) {
        pos_ += n;
      } else if (is_digit(s_[pos_])) {
        number();
      } else if (is_name_start(s_[pos_])) {
        std::size_t j = pos_;
        while (j < s_.size() && is_name_char(s_[j])) ++j;
        push(Tok::Name, pos_, s_.substr(pos_, j - pos_));
        pos_ = j;
      } else if (s_[pos_] == '\'' || s_[pos_] == '"') {
        string_literal();
      } else {
        op(brackets);
      }
    }
  }

  void number() {
    const std::size_t start = pos_;
    // A float: digits, then a fraction and/or an exponent (not right after a '.').
    if (start == 0 || s_[start - 1] != '.') {
      const std::size_t int_end = digits_end(s_, start, dec);
      std::size_t frac_end = int_end;
      if (int_end < s_.size() && s_[int_end] == '.') {
        const std::size_t f = digits_end(s_, int_end + 1, dec);
        if (f > int_end + 1) frac_end = f;
      }
      std::size_t end = frac_end > int_end ? frac_end : std::string::npos;
      if (frac_end < s_.size() && (s_[frac_end] == 'e' || s_[frac_end] == 'E')) {
        std::size_t e = frac_end + 1;
        if (e < s_.size() && (s_[e] == '+' || s_[e] == '-')) ++e;
        const std::size_t exp_end = digits_end(s_, e, dec);
        if (exp_end > e) end = exp_end;
      }
      if (end != std::string::npos) {
        const std::string text = without_underscores(s_, start, end);
        Token t{Tok::Float, Op::Add, static_cast<std::uint32_t>(start), {}};
        t.number = std::strtod(text.c_str(), nullptr);
        tokens_.push_back(std::move(t));
        pos_ = end;
        return;
      }
    }
    int base = 10;
    std::size_t digits_start = start, end;
    const char p = start + 1 < s_.size() ? static_cast<char>(s_[start + 1] | 0x20) : 0;
    bool (*digit)(char) = dec;
    if (s_[start] == '0' && (p == 'b' || p == 'o' || p == 'x')) {
      base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      digit = p == 'b' ? bin : p == 'o' ? oct : hex;
      digits_start = start + 2;
      if (digits_start < s_.size() && s_[digits_start] == '_') ++digits_start;
    }
    end = digits_end(s_, digits_start, digit);
    if (end == digits_start) {  // "0x" without digits: the integer 0, then a name
      base = 10;
      digits_start = start;
      end = start + 1;
    } else if (base == 10 && s_[start] == '0') {  // decimal zero: 0, 00, 0_0 only
      end = start + 1;
      while (end < s_.size() && (s_[end] == '0' || (s_[end] == '_' && end + 1 < s_.size() && s_[end + 1] == '0'))) {
        end += s_[end] == '_' ? 2 : 1;
      }
    }
    const std::string digits = without_underscores(s_, digits_start, end);
    Token t{Tok::Integer, Op::Add, static_cast<std::uint32_t>(start), {}};
    const auto res = std::from_chars(digits.data(), digits.data() + digits.size(), t.integer, base);
    if (res.ec != std::errc()) fail_at(s_, static_cast<std::uint32_t>(start), "integer literal too large (more than 64 bits)");
    tokens_.push_back(std::move(t));
    pos_ = end;
  }

  void string_literal() {
    const std::size_t start = pos_;
    const char quote = s_[pos_];
    std::size_t i = pos_ + 1;
    while (i < s_.size() && s_[i] != quote) i += s_[i] == '\\' ? 2 : 1;
    if (i >= s_.size()) fail_at(s_, static_cast<std::uint32_t>(start), std::string("unterminated string literal"));
    const std::string body = s_.substr(start + 1, i - start - 1);
    push(Tok::String, start, decode_string_literal(body, s_, static_cast<std::uint32_t>(start)));
    pos_ = i + 1;
  }

  void op(std::vector<char>& brackets) {
    static const struct {
      const char* text;
      Op op;
    } kOps[] = {
        {"**", Op::Pow}, {"//", Op::FloorDiv}, {"==", Op::Eq}, {"!=", Op::Ne}, {">=", Op::Ge}, {"<=", Op::Le},
        {"+", Op::Add}, {"-", Op::Sub}, {"/", Op::Div}, {"*", Op::Mul}, {"%", Op::Mod}, {"~", Op::Tilde},
        {"[", Op::LBracket}, {"]", Op::RBracket}, {"(", Op::LParen}, {")", Op::RParen}, {"{", Op::LBrace},
        {"}", Op::RBrace}, {">", Op::Gt}, {"<", Op::Lt}, {"=", Op::Assign}, {".", Op::Dot}, {":", Op::Colon},
        {"|", Op::Pipe}, {",", Op::Comma}, {";", Op::Semicolon},
    };
    for (const auto& o : kOps) {
      if (!starts_with(s_, pos_, o.text)) continue;
      const char c = o.text[0];
      if (o.text[1] == 0 && (c == '(' || c == '[' || c == '{')) {
        brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (o.text[1] == 0 && (c == ')' || c == ']' || c == '}')) {
        if (brackets.empty()) fail_at(s_, static_cast<std::uint32_t>(pos_), std::string("unexpected '") + c + "'");
        if (brackets.back() != c) {
          fail_at(s_, static_cast<std::uint32_t>(pos_),
                  std::string("unexpected '") + c + "', expected '" + brackets.back() + "'");
        }
        brackets.pop_back();
      }
      Token t{Tok::Op, o.op, static_cast<std::uint32_t>(pos_), {}};
      tokens_.push_back(std::move(t));
      pos_ += std::char_traits<char>::length(o.text);
      return;
    }
    std::string ch(1, s_[pos_]);
    if (static_cast<unsigned char>(s_[pos_]) >= 0x80) ch = s_.substr(pos_, tok::utf8_char_len(s_, pos_));
    fail_at(s_, static_cast<std::uint32_t>(pos_), "unexpected character '" + ch + "'");
  }

  const std::string& s_;
  std::size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> lex(const std::string& normalized_source) { return Lexer(normalized_source).run(); }

const char* op_text(Op op) {
  static const char* kText[] = {"+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{",
                                "}", "==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";"};
  return kText[static_cast<int>(op)];
}

}  // namespace hydragen::chat
