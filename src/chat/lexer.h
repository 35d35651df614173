// Template text -> tokens, with jinja2's whitespace rules as transformers configures them:
// trim_blocks (the newline after a block or comment tag goes), lstrip_blocks (spaces before a
// block or comment tag on its own line go), `-` / `+` on a tag, and keep_trailing_newline off.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hydragen::chat {

enum class Tok : std::uint8_t {
  Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Op, Eof
};

enum class Op : std::uint8_t {
  Add, Sub, Div, FloorDiv, Mul, Mod, Pow, Tilde, LBracket, RBracket, LParen, RParen, LBrace,
  RBrace, Eq, Ne, Gt, Ge, Lt, Le, Assign, Dot, Colon, Pipe, Comma, Semicolon
};

struct Token {
  Tok type;
  Op op = Op::Add;        // Tok::Op
  std::uint32_t offset;   // byte offset into the normalized source
  std::string text;       // Data text, Name, or the decoded String
  std::int64_t integer = 0;
  double number = 0;
};

// jinja2 reads "\r\n" and "\r" as "\n" and drops one trailing newline before lexing; offsets
// refer to this text.
std::string normalize_newlines(const std::string& source);

// Throws TemplateError (with the position) for text jinja2 cannot lex.
std::vector<Token> lex(const std::string& normalized_source);

const char* op_text(Op op);

}  // namespace hydragen::chat
