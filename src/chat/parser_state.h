// The parser's state and grammar, shared by parser.cpp (statements and assignment targets) and
// parse_expressions.cpp (expressions).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/lexer.h"
#include "chat/parser.h"
#include "chat/source_position.h"

namespace hydragen::chat {

class Parser {
 public:
  Parser(const std::string& source, std::vector<Token> tokens) : src_(source), toks_(std::move(tokens)) {}

  Body parse();

 private:
  // --- tokens ---
  const Token& cur() const { return toks_[i_]; }
  const Token& peek() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  bool is_op(Op op) const { return cur().type == Tok::Op && cur().op == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(Op op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& message) const { fail_at(src_, cur().offset, message); }
  [[noreturn]] void fail_at_token(const Token& t, const std::string& message) const { fail_at(src_, t.offset, message); }
  std::string describe(const Token& t) const;  // for messages: "'%}'", "a string", ...
  void expect_op(Op op);
  void expect_block_end();
  std::string expect_name();

  // One more level of the tree being built, for as long as the parse function runs: a
  // parenthesis, a block, or each link of a chain (a + b + c, x.y.z, x|f|g) nests the AST.
  struct Nesting {
    explicit Nesting(Parser& p, bool now = true) : p_(p) {
      if (now) add();
    }
    ~Nesting() { p_.depth_ -= levels_; }
    void add() {
      ++levels_;
      if (++p_.depth_ > kMaxParseNesting) p_.fail("nested deeper than " + std::to_string(kMaxParseNesting) + " levels");
    }
    Parser& p_;
    int levels_ = 0;
  };

  // --- statements (parser.cpp) ---
  // Parses until a block tag whose name is one of `ends` (left as the current token).
  Body subparse(std::initializer_list<const char*> ends);
  // The body of a statement up to one of `ends`: "%}", statements, then the end tag's name is
  // the current token (consumed when drop_end).
  Body parse_statements(std::initializer_list<const char*> ends, bool drop_end, const Token& opener);
  void parse_statement(Body& body);
  StmtPtr parse_if();
  StmtPtr parse_for();
  StmtPtr parse_set();
  StmtPtr parse_macro();
  StmtPtr parse_with();
  StmtPtr parse_filter_block();
  Target parse_assign_target(bool with_tuple, bool with_namespace, std::initializer_list<const char*> extra_ends);
  Target target_primary(bool with_namespace);
  bool is_tuple_end(std::initializer_list<const char*> extra_ends) const;

  // --- expressions (parse_expressions.cpp), by jinja2's precedence ---
  // `a, b` as a tuple, or one expression; `()` only with explicit_parentheses.
  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra_ends, bool explicit_parentheses);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();  // a if c else b
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();   // + -
  ExprPtr parse_concat();  // ~
  ExprPtr parse_math2();   // * / // %
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);      // .attr [index] (call)
  ExprPtr parse_filter_expr(ExprPtr node);  // | filter, is test, (call)
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();  // an index or a slice inside []
  CallArgsExpr parse_call_args();
  ExprPtr parse_call(ExprPtr node);
  std::string dotted_name();
  // `| name(args) | ...`; with start_inline the first filter has no leading '|'.
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);

  const std::string& src_;
  std::vector<Token> toks_;
  std::size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::vector<std::string>> macro_names_;  // names each macro being parsed reads
};

}  // namespace hydragen::chat
