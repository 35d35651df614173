// Expressions, by jinja2's precedence: conditional, or, and, not, comparisons, + -, ~, * / // %,
// **, unary signs, then a primary with its postfix chain (.attr, [index], (call)) and filters.
#include "chat/parser_state.h"

namespace hydragen::chat {

ExprPtr Parser::parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra_ends,
                            bool explicit_parentheses) {
  const std::uint32_t off = cur().offset;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(Op::Comma);
    if (is_tuple_end(extra_ends)) break;
    items.push_back(parse_expression(with_condexpr));
    if (is_op(Op::Comma)) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items.front());
    if (!explicit_parentheses) fail("expected an expression, got " + describe(cur()));
  }
  auto t = std::make_unique<SeqExpr>(ExprKind::Tuple, off);
  t->items = std::move(items);
  return t;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  Nesting nesting(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  std::uint32_t off = cur().offset;
  ExprPtr expr1 = parse_or();
  Nesting chain(*this, false);
  while (skip_name("if")) {
    chain.add();
    auto c = std::make_unique<CondExpr>(ExprKind::CondExpr, off);
    c->test = parse_or();
    if (skip_name("else")) c->otherwise = parse_condexpr();
    c->then = std::move(expr1);
    expr1 = std::move(c);
    off = cur().offset;
  }
  return expr1;
}

ExprPtr Parser::parse_or() {
  const std::uint32_t off = cur().offset;
  ExprPtr left = parse_and();
  Nesting chain(*this, false);
  while (skip_name("or")) {
    chain.add();
    left = std::make_unique<BinaryExpr>(ExprKind::Or, off, BinOp::Add, std::move(left), parse_and());
  }
  return left;
}

ExprPtr Parser::parse_and() {
  const std::uint32_t off = cur().offset;
  ExprPtr left = parse_not();
  Nesting chain(*this, false);
  while (skip_name("and")) {
    chain.add();
    left = std::make_unique<BinaryExpr>(ExprKind::And, off, BinOp::Add, std::move(left), parse_not());
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    Nesting nesting(*this);
    const std::uint32_t off = next().offset;
    return std::make_unique<UnaryExpr>(ExprKind::Not, off, parse_not());
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const std::uint32_t off = cur().offset;
  ExprPtr expr = parse_math1();
  std::vector<std::pair<CmpOp, ExprPtr>> ops;
  while (true) {
    const Token& t = cur();
    CmpOp op;
    if (t.type == Tok::Op && (t.op == Op::Eq || t.op == Op::Ne || t.op == Op::Lt || t.op == Op::Le ||
                              t.op == Op::Gt || t.op == Op::Ge)) {
      op = t.op == Op::Eq ? CmpOp::Eq : t.op == Op::Ne ? CmpOp::Ne : t.op == Op::Lt ? CmpOp::Lt
           : t.op == Op::Le ? CmpOp::Le : t.op == Op::Gt ? CmpOp::Gt : CmpOp::Ge;
      next();
    } else if (is_name("in")) {
      op = CmpOp::In;
      next();
    } else if (is_name("not") && peek().type == Tok::Name && peek().text == "in") {
      op = CmpOp::NotIn;
      next();
      next();
    } else {
      break;
    }
    ops.emplace_back(op, parse_math1());
  }
  if (ops.empty()) return expr;
  auto c = std::make_unique<CompareExpr>(ExprKind::Compare, off);
  c->first = std::move(expr);
  c->rest = std::move(ops);
  return c;
}

ExprPtr Parser::parse_math1() {
  const std::uint32_t off = cur().offset;
  ExprPtr left = parse_concat();
  Nesting chain(*this, false);
  while (is_op(Op::Add) || is_op(Op::Sub)) {
    chain.add();
    const BinOp op = next().op == Op::Add ? BinOp::Add : BinOp::Sub;
    left = std::make_unique<BinaryExpr>(ExprKind::Binary, off, op, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const std::uint32_t off = cur().offset;
  ExprPtr first = parse_math2();
  if (!is_op(Op::Tilde)) return first;
  auto c = std::make_unique<ConcatExpr>(ExprKind::Concat, off);
  c->parts.push_back(std::move(first));
  while (skip_op(Op::Tilde)) c->parts.push_back(parse_math2());
  return c;
}

ExprPtr Parser::parse_math2() {
  const std::uint32_t off = cur().offset;
  ExprPtr left = parse_pow();
  Nesting chain(*this, false);
  while (is_op(Op::Mul) || is_op(Op::Div) || is_op(Op::FloorDiv) || is_op(Op::Mod)) {
    chain.add();
    const Op o = next().op;
    const BinOp op = o == Op::Mul ? BinOp::Mul : o == Op::Div ? BinOp::Div : o == Op::FloorDiv ? BinOp::FloorDiv : BinOp::Mod;
    left = std::make_unique<BinaryExpr>(ExprKind::Binary, off, op, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  const std::uint32_t off = cur().offset;
  ExprPtr left = parse_unary(true);
  Nesting chain(*this, false);
  while (skip_op(Op::Pow)) {
    chain.add();
    left = std::make_unique<BinaryExpr>(ExprKind::Binary, off, BinOp::Pow, std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  ExprPtr node;
  const std::uint32_t off = cur().offset;
  if (is_op(Op::Sub) || is_op(Op::Add)) {
    Nesting nesting(*this);
    const ExprKind k = next().op == Op::Sub ? ExprKind::Neg : ExprKind::Pos;
    node = std::make_unique<UnaryExpr>(k, off, parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  switch (t.type) {
    case Tok::Name: {
      next();
      if (t.text == "true" || t.text == "True") return std::make_unique<ConstExpr>(t.offset, Value(true));
      if (t.text == "false" || t.text == "False") return std::make_unique<ConstExpr>(t.offset, Value(false));
      if (t.text == "none" || t.text == "None") return std::make_unique<ConstExpr>(t.offset, Value::none());
      for (auto& names : macro_names_) names.push_back(t.text);
      return std::make_unique<NameExpr>(t.offset, t.text);
    }
    case Tok::String: {
      std::string s;
      const std::uint32_t off = t.offset;
      while (cur().type == Tok::String) s += next().text;
      return std::make_unique<ConstExpr>(off, Value(std::move(s)));
    }
    case Tok::Integer: next(); return std::make_unique<ConstExpr>(t.offset, Value(t.integer));
    case Tok::Float: next(); return std::make_unique<ConstExpr>(t.offset, Value(t.number));
    case Tok::Op:
      if (t.op == Op::LParen) {
        next();
        ExprPtr e = parse_tuple(true, {}, true);
        expect_op(Op::RParen);
        return e;
      }
      if (t.op == Op::LBracket) return parse_list();
      if (t.op == Op::LBrace) return parse_dict();
      break;
    default: break;
  }
  fail("unexpected " + describe(t));
}

ExprPtr Parser::parse_list() {
  const std::uint32_t off = next().offset;
  auto l = std::make_unique<SeqExpr>(ExprKind::List, off);
  while (!is_op(Op::RBracket)) {
    if (!l->items.empty()) expect_op(Op::Comma);
    if (is_op(Op::RBracket)) break;
    l->items.push_back(parse_expression(true));
  }
  expect_op(Op::RBracket);
  return l;
}

ExprPtr Parser::parse_dict() {
  const std::uint32_t off = next().offset;
  auto d = std::make_unique<DictExpr>(ExprKind::Dict, off);
  while (!is_op(Op::RBrace)) {
    if (!d->items.empty()) expect_op(Op::Comma);
    if (is_op(Op::RBrace)) break;
    ExprPtr key = parse_expression(true);
    expect_op(Op::Colon);
    d->items.emplace_back(std::move(key), parse_expression(true));
  }
  expect_op(Op::RBrace);
  return d;
}

ExprPtr Parser::parse_postfix(ExprPtr node) {
  Nesting chain(*this, false);
  for (;; chain.add()) {
    if (is_op(Op::Dot) || is_op(Op::LBracket)) {
      node = parse_subscript(std::move(node));
    } else if (is_op(Op::LParen)) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  Nesting chain(*this, false);
  for (;; chain.add()) {
    if (is_op(Op::Pipe)) {
      node = parse_filter(std::move(node), false);
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op(Op::LParen)) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  Nesting nesting(*this);
  const Token& t = next();
  if (t.op == Op::Dot) {
    const Token& attr = cur();
    if (attr.type == Tok::Name) {
      next();
      return std::make_unique<GetattrExpr>(t.offset, std::move(node), attr.text);
    }
    if (attr.type != Tok::Integer) fail("expected a name or a number after '.', got " + describe(attr));
    next();
    return std::make_unique<GetitemExpr>(t.offset, std::move(node), std::make_unique<ConstExpr>(attr.offset, Value(attr.integer)));
  }
  std::vector<ExprPtr> args;
  while (!is_op(Op::RBracket)) {
    if (!args.empty()) expect_op(Op::Comma);
    args.push_back(parse_subscribed());
  }
  expect_op(Op::RBracket);
  if (args.empty()) fail_at_token(t, "expected a subscript inside '[]'");
  ExprPtr index;
  if (args.size() == 1) {
    index = std::move(args.front());
  } else {
    auto tuple = std::make_unique<SeqExpr>(ExprKind::Tuple, t.offset);
    tuple->items = std::move(args);
    index = std::move(tuple);
  }
  return std::make_unique<GetitemExpr>(t.offset, std::move(node), std::move(index));
}

ExprPtr Parser::parse_subscribed() {
  const std::uint32_t off = cur().offset;
  ExprPtr start;
  if (!is_op(Op::Colon)) {
    start = parse_expression(true);
    if (!is_op(Op::Colon)) return start;
  }
  next();  // the first ':'
  auto s = std::make_unique<SliceExpr>(ExprKind::Slice, off);
  s->start = std::move(start);
  if (!is_op(Op::Colon) && !is_op(Op::RBracket) && !is_op(Op::Comma)) s->stop = parse_expression(true);
  if (skip_op(Op::Colon)) {
    if (!is_op(Op::RBracket) && !is_op(Op::Comma)) s->step = parse_expression(true);
  }
  return s;
}

CallArgsExpr Parser::parse_call_args() {
  const Token& open = cur();
  expect_op(Op::LParen);
  CallArgsExpr a;
  bool need_comma = false;
  auto ensure = [&](bool ok) {
    if (!ok) fail_at_token(open, "invalid syntax for a function call");
  };
  while (!is_op(Op::RParen)) {
    if (need_comma) {
      expect_op(Op::Comma);
      if (is_op(Op::RParen)) break;
    }
    if (skip_op(Op::Mul)) {
      ensure(!a.star_args && !a.star_kwargs);
      a.star_args = parse_expression(true);
    } else if (skip_op(Op::Pow)) {
      ensure(!a.star_kwargs);
      a.star_kwargs = parse_expression(true);
    } else if (cur().type == Tok::Name && peek().type == Tok::Op && peek().op == Op::Assign) {
      ensure(!a.star_kwargs);
      std::string key = next().text;
      next();
      a.keyword.emplace_back(std::move(key), parse_expression(true));
    } else {
      ensure(!a.star_args && !a.star_kwargs && a.keyword.empty());
      a.positional.push_back(parse_expression(true));
    }
    need_comma = true;
  }
  expect_op(Op::RParen);
  return a;
}

ExprPtr Parser::parse_call(ExprPtr node) {
  Nesting nesting(*this);
  auto c = std::make_unique<CallExpr>(ExprKind::Call, node->offset);
  c->callee = std::move(node);
  c->args = parse_call_args();
  return c;
}

std::string Parser::dotted_name() {
  std::string name = expect_name();
  while (skip_op(Op::Dot)) {
    name += '.';
    name += expect_name();  // not "." + expect_name(): GCC 12 sees a false -Wrestrict there
  }
  return name;
}

// `| name(args) | ...`; with start_inline the first filter has no leading '|'.
ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  Nesting chain(*this, false);
  while (is_op(Op::Pipe) || start_inline) {
    chain.add();
    if (!start_inline) next();
    start_inline = false;
    const Token& name_tok = cur();
    auto f = std::make_unique<FilterExpr>(ExprKind::Filter, name_tok.offset);
    f->name = dotted_name();
    f->fn = find_filter(f->name);
    if (f->fn == nullptr) fail_at_token(name_tok, "no filter named '" + f->name + "'");
    if (is_op(Op::LParen)) f->args = parse_call_args();
    f->input = std::move(node);
    node = std::move(f);
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  Nesting nesting(*this);
  const Token& is_tok = next();
  const bool negated = skip_name("not");
  const Token& name_tok = cur();
  auto t = std::make_unique<TestExpr>(ExprKind::Test, is_tok.offset);
  t->name = dotted_name();
  t->fn = find_test(t->name);
  if (t->fn == nullptr) fail_at_token(name_tok, "no test named '" + t->name + "'");
  const Token& c = cur();
  if (is_op(Op::LParen)) {
    t->args = parse_call_args();
  } else if ((c.type == Tok::Name || c.type == Tok::String || c.type == Tok::Integer || c.type == Tok::Float ||
              (c.type == Tok::Op && (c.op == Op::LBracket || c.op == Op::LBrace))) &&
             !(c.type == Tok::Name && (c.text == "else" || c.text == "or" || c.text == "and"))) {
    if (is_name("is")) fail("tests cannot be chained with 'is'");
    t->args.positional.push_back(parse_postfix(parse_primary()));
  }
  t->input = std::move(node);
  if (!negated) return t;
  return std::make_unique<UnaryExpr>(ExprKind::Not, is_tok.offset, std::move(t));
}

}  // namespace hydragen::chat
