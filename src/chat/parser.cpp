// Statements and assignment targets (jinja2's grammar), and parse_program, the entry.
#include "chat/parser.h"

#include "chat/parser_state.h"
#include "tokenizer/utf8.h"

namespace hydragen::chat {

namespace {

// Statements jinja2 has that this interpreter refuses, with the reason.
const char* unsupported_tag(const std::string& name) {
  if (name == "block" || name == "extends" || name == "include" || name == "import" || name == "from") {
    return "template inheritance and inclusion are not available to a chat template";
  }
  if (name == "call") return "call blocks are not supported";
  if (name == "autoescape") return "autoescape blocks are not supported";
  return nullptr;
}

}  // namespace

std::string Parser::describe(const Token& t) const {
  switch (t.type) {
    case Tok::Data: return "text";
    case Tok::VarBegin: return "'{{'";
    case Tok::VarEnd: return "'}}'";
    case Tok::BlockBegin: return "'{%'";
    case Tok::BlockEnd: return "'%}'";
    case Tok::Name: return "'" + t.text + "'";
    case Tok::String: return "a string";
    case Tok::Integer:
    case Tok::Float: return "a number";
    case Tok::Op: return std::string("'") + op_text(t.op) + "'";
    case Tok::Eof: return "the end of the template";
  }
  return "a token";
}

void Parser::expect_op(Op op) {
  if (!skip_op(op)) fail(std::string("expected '") + op_text(op) + "', got " + describe(cur()));
}

Body Parser::parse() {
  Body body = subparse({});
  if (cur().type != Tok::Eof) fail("unexpected tag");
  return body;
}

void Parser::expect_block_end() {
  if (cur().type != Tok::BlockEnd) fail("expected '%}' to end the statement, got " + describe(cur()));
  next();
}

std::string Parser::expect_name() {
  if (cur().type != Tok::Name) fail("expected a name, got " + describe(cur()));
  return next().text;
}

// Parses until a block tag whose name is one of `ends` (left as the current token).
Body Parser::subparse(std::initializer_list<const char*> ends) {
  Nesting nesting(*this);
  Body body;
  while (cur().type != Tok::Eof) {
    const Token& t = cur();
    if (t.type == Tok::Data) {
      body.push_back(std::make_unique<TextStmt>(t.offset, t.text));
      next();
    } else if (t.type == Tok::VarBegin) {
      next();
      const std::uint32_t off = cur().offset;
      ExprPtr e = parse_tuple(true, {}, false);
      if (cur().type != Tok::VarEnd) fail("expected '}}', got " + describe(cur()));
      next();
      body.push_back(std::make_unique<OutputStmt>(off, std::move(e)));
    } else if (t.type == Tok::BlockBegin) {
      next();
      if (cur().type == Tok::Name) {
        for (const char* e : ends) {
          if (cur().text == e) return body;
        }
      }
      parse_statement(body);
      expect_block_end();
    } else {
      fail("unexpected " + describe(t));
    }
  }
  return body;
}

// The body of a statement up to one of `ends`: "%}", statements, then the end tag's name is
// the current token (consumed when drop_end).
Body Parser::parse_statements(std::initializer_list<const char*> ends, bool drop_end, const Token& opener) {
  skip_op(Op::Colon);
  expect_block_end();
  Body body = subparse(ends);
  if (cur().type == Tok::Eof) {
    std::string names;
    for (const char* e : ends) names += std::string(names.empty() ? "'" : " or '") + e + "'";
    fail_at_token(opener, "this '" + opener.text + "' is never closed: expected " + names);
  }
  if (drop_end) next();
  return body;
}

void Parser::parse_statement(Body& body) {
  if (cur().type != Tok::Name) fail("expected a tag name, got " + describe(cur()));
  const Token& t = cur();
  const std::string& name = t.text;
  if (name == "if") return body.push_back(parse_if());
  if (name == "for") return body.push_back(parse_for());
  if (name == "set") return body.push_back(parse_set());
  if (name == "macro") return body.push_back(parse_macro());
  if (name == "with") return body.push_back(parse_with());
  if (name == "filter") return body.push_back(parse_filter_block());
  if (name == "generation") {
    const Token& opener = next();
    auto s = std::make_unique<BlockStmt>(StmtKind::Block, opener.offset);
    s->body = parse_statements({"endgeneration"}, true, opener);
    return body.push_back(std::move(s));
  }
  if (name == "print") {
    next();
    for (bool first = true; cur().type != Tok::BlockEnd; first = false) {
      if (!first) expect_op(Op::Comma);
      const std::uint32_t off = cur().offset;
      body.push_back(std::make_unique<OutputStmt>(off, parse_expression(true)));
    }
    return;
  }
  if (name == "break" || name == "continue") {
    if (loop_depth_ == 0) fail("'" + name + "' outside a for loop");
    next();
    return body.push_back(std::make_unique<Stmt>(name == "break" ? StmtKind::Break : StmtKind::Continue, t.offset));
  }
  if (const char* why = unsupported_tag(name)) fail("'" + name + "': " + why);
  fail("unknown tag '" + name + "'");
}

StmtPtr Parser::parse_if() {
  const Token& opener = next();
  auto s = std::make_unique<IfStmt>(StmtKind::If, opener.offset);
  while (true) {
    ExprPtr test = parse_tuple(false, {}, false);
    Body body = parse_statements({"elif", "else", "endif"}, false, opener);
    s->branches.emplace_back(std::move(test), std::move(body));
    const std::string which = next().text;
    if (which == "elif") continue;
    if (which == "else") s->otherwise = parse_statements({"endif"}, true, opener);
    break;
  }
  return s;
}

StmtPtr Parser::parse_for() {
  const Token& opener = next();
  auto s = std::make_unique<ForStmt>(StmtKind::For, opener.offset);
  s->target = parse_assign_target(true, false, {"in"});
  if (!skip_name("in")) fail("expected 'in' in the for loop, got " + describe(cur()));
  s->iterable = parse_tuple(false, {"recursive"}, false);
  if (skip_name("if")) s->filter = parse_expression(true);
  if (is_name("recursive")) fail("recursive for loops are not supported");
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false, opener);
  --loop_depth_;
  if (next().text == "else") s->otherwise = parse_statements({"endfor"}, true, opener);
  return s;
}

StmtPtr Parser::parse_set() {
  const Token& opener = next();
  Target target = parse_assign_target(true, true, {});
  if (skip_op(Op::Assign)) {
    auto s = std::make_unique<SetStmt>(StmtKind::Set, opener.offset);
    s->target = std::move(target);
    s->value = parse_tuple(true, {}, false);
    return s;
  }
  auto s = std::make_unique<SetBlockStmt>(StmtKind::SetBlock, opener.offset);
  s->target = std::move(target);
  s->filter = parse_filter(nullptr, false);
  s->body = parse_statements({"endset"}, true, opener);
  return s;
}

StmtPtr Parser::parse_macro() {
  const Token& opener = next();
  auto s = std::make_unique<MacroStmt>(StmtKind::Macro, opener.offset);
  s->name = expect_name();
  expect_op(Op::LParen);
  while (!is_op(Op::RParen)) {
    if (!s->params.empty()) expect_op(Op::Comma);
    if (is_op(Op::RParen)) break;
    s->params.push_back(expect_name());
    if (skip_op(Op::Assign)) {
      s->defaults.push_back(parse_expression(true));
    } else if (!s->defaults.empty()) {
      fail("a parameter without a default follows one with a default");
    }
  }
  expect_op(Op::RParen);
  macro_names_.emplace_back();
  const int saved_loops = loop_depth_;
  loop_depth_ = 0;
  s->body = parse_statements({"endmacro"}, true, opener);
  loop_depth_ = saved_loops;
  for (const std::string& n : macro_names_.back()) {
    s->uses_varargs = s->uses_varargs || n == "varargs";
    s->uses_kwargs = s->uses_kwargs || n == "kwargs";
  }
  macro_names_.pop_back();
  return s;
}

StmtPtr Parser::parse_with() {
  const Token& opener = next();
  auto s = std::make_unique<WithStmt>(StmtKind::With, opener.offset);
  while (cur().type != Tok::BlockEnd) {
    if (!s->assigns.empty()) expect_op(Op::Comma);
    Target t = parse_assign_target(true, false, {});
    expect_op(Op::Assign);
    s->assigns.emplace_back(std::move(t), parse_expression(true));
  }
  s->body = parse_statements({"endwith"}, true, opener);
  return s;
}

StmtPtr Parser::parse_filter_block() {
  const Token& opener = next();
  auto s = std::make_unique<FilterBlockStmt>(StmtKind::FilterBlock, opener.offset);
  s->filter = parse_filter(nullptr, true);
  s->body = parse_statements({"endfilter"}, true, opener);
  return s;
}

Target Parser::parse_assign_target(bool with_tuple, bool with_namespace, std::initializer_list<const char*> extra_ends) {
  const std::uint32_t off = cur().offset;
  if (!with_tuple) return target_primary(with_namespace);
  std::vector<Target> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(Op::Comma);
    if (is_tuple_end(extra_ends)) break;
    items.push_back(target_primary(with_namespace));
    if (is_op(Op::Comma)) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (items.empty()) fail("expected a name to assign to, got " + describe(cur()));
    return std::move(items.front());
  }
  Target t;
  t.kind = Target::Kind::Tuple;
  t.offset = off;
  t.items = std::move(items);
  return t;
}

Target Parser::target_primary(bool with_namespace) {
  const Token& t = cur();
  if (t.type == Tok::Op && t.op == Op::LParen) {
    next();
    Target inner = parse_assign_target(true, false, {});
    expect_op(Op::RParen);
    return inner;
  }
  if (t.type != Tok::Name || t.text == "true" || t.text == "false" || t.text == "none" || t.text == "True" ||
      t.text == "False" || t.text == "None") {
    fail("cannot assign to " + describe(t));
  }
  Target target;
  target.offset = t.offset;
  target.name = next().text;
  if (with_namespace && skip_op(Op::Dot)) {
    target.kind = Target::Kind::NamespaceAttr;
    target.attr = expect_name();
  }
  return target;
}

bool Parser::is_tuple_end(std::initializer_list<const char*> extra_ends) const {
  const Token& t = cur();
  if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || (t.type == Tok::Op && t.op == Op::RParen)) return true;
  if (t.type == Tok::Name) {
    for (const char* e : extra_ends) {
      if (t.text == e) return true;
    }
  }
  return false;
}

std::unique_ptr<Program> parse_program(const std::string& source) {
  if (const std::size_t bad = tok::utf8_invalid_at(source); bad != std::string::npos) {
    fail_at(source, static_cast<std::uint32_t>(bad), "the template is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  }
  auto program = std::make_unique<Program>();
  program->source = normalize_newlines(source);
  Parser parser(program->source, lex(program->source));
  program->body = parser.parse();
  return program;
}

}  // namespace hydragen::chat
