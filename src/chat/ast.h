// The parsed template: expressions and statements, each with the byte offset it starts at
// (for error positions). Filters and tests are resolved to their functions at parse time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/builtins.h"
#include "chat/value.h"

namespace hydragen::chat {

enum class ExprKind : std::uint8_t {
  Const, Name, List, Tuple, Dict, Getattr, Getitem, Slice, Call, Filter, Test, Neg, Pos, Not,
  Binary, Compare, And, Or, Concat, CondExpr
};
enum class BinOp : std::uint8_t { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CmpOp : std::uint8_t { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr {
  Expr(ExprKind k, std::uint32_t off) : kind(k), offset(off) {}
  virtual ~Expr() = default;
  ExprKind kind;
  std::uint32_t offset;
};
using ExprPtr = std::unique_ptr<Expr>;

struct CallArgsExpr {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star_args, star_kwargs;  // *args, **kwargs (may be null)
};

struct ConstExpr : Expr {
  ConstExpr(std::uint32_t off, Value v) : Expr(ExprKind::Const, off), value(std::move(v)) {}
  Value value;
};
struct NameExpr : Expr {
  NameExpr(std::uint32_t off, std::string n) : Expr(ExprKind::Name, off), name(std::move(n)) {}
  std::string name;
};
struct SeqExpr : Expr {  // ExprKind::List or ExprKind::Tuple
  using Expr::Expr;
  std::vector<ExprPtr> items;
};
struct DictExpr : Expr {
  using Expr::Expr;
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct GetattrExpr : Expr {
  GetattrExpr(std::uint32_t off, ExprPtr o, std::string a)
      : Expr(ExprKind::Getattr, off), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};
struct GetitemExpr : Expr {
  GetitemExpr(std::uint32_t off, ExprPtr o, ExprPtr i)
      : Expr(ExprKind::Getitem, off), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object, index;  // index may be a SliceExpr
};
struct SliceExpr : Expr {
  using Expr::Expr;
  ExprPtr start, stop, step;  // each may be null
};
struct CallExpr : Expr {
  using Expr::Expr;
  ExprPtr callee;
  CallArgsExpr args;
};
struct FilterExpr : Expr {
  using Expr::Expr;
  ExprPtr input;  // null for the filter of a {% filter %} or {% set x | f %} block
  std::string name;
  FilterFn fn = nullptr;
  CallArgsExpr args;
};
struct TestExpr : Expr {
  using Expr::Expr;
  ExprPtr input;
  std::string name;
  TestFn fn = nullptr;
  CallArgsExpr args;
};
struct UnaryExpr : Expr {  // Neg, Pos, Not
  UnaryExpr(ExprKind k, std::uint32_t off, ExprPtr o) : Expr(k, off), operand(std::move(o)) {}
  ExprPtr operand;
};
struct BinaryExpr : Expr {  // Binary (with op), And, Or
  BinaryExpr(ExprKind k, std::uint32_t off, BinOp o, ExprPtr l, ExprPtr r)
      : Expr(k, off), op(o), left(std::move(l)), right(std::move(r)) {}
  BinOp op;
  ExprPtr left, right;
};
struct CompareExpr : Expr {
  using Expr::Expr;
  ExprPtr first;
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
};
struct ConcatExpr : Expr {
  using Expr::Expr;
  std::vector<ExprPtr> parts;
};
struct CondExpr : Expr {
  using Expr::Expr;
  ExprPtr test, then, otherwise;  // otherwise may be null: undefined
};

// What a set, for or with statement assigns to.
struct Target {
  enum class Kind : std::uint8_t { Name, Tuple, NamespaceAttr } kind = Kind::Name;
  std::uint32_t offset = 0;
  std::string name;  // Name, or the namespace of NamespaceAttr
  std::string attr;  // NamespaceAttr
  std::vector<Target> items;  // Tuple
};

enum class StmtKind : std::uint8_t { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, With, FilterBlock, Block };

struct Stmt {
  Stmt(StmtKind k, std::uint32_t off) : kind(k), offset(off) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  std::uint32_t offset;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt(std::uint32_t off, std::string t) : Stmt(StmtKind::Text, off), text(std::move(t)) {}
  std::string text;
};
struct OutputStmt : Stmt {
  OutputStmt(std::uint32_t off, ExprPtr e) : Stmt(StmtKind::Output, off), expr(std::move(e)) {}
  ExprPtr expr;
};
struct IfStmt : Stmt {
  using Stmt::Stmt;
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
  Body otherwise;
};
struct ForStmt : Stmt {
  using Stmt::Stmt;
  Target target;
  ExprPtr iterable, filter;  // filter: `for x in xs if cond` (may be null)
  Body body, otherwise;
};
struct SetStmt : Stmt {
  using Stmt::Stmt;
  Target target;
  ExprPtr value;
};
struct SetBlockStmt : Stmt {  // {% set x %}...{% endset %}, optionally `set x | filter`
  using Stmt::Stmt;
  Target target;
  ExprPtr filter;  // a FilterExpr chain whose innermost input is null (may be null)
  Body body;
};
struct MacroStmt : Stmt {
  using Stmt::Stmt;
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  bool uses_varargs = false, uses_kwargs = false;
  Body body;
};
struct WithStmt : Stmt {
  using Stmt::Stmt;
  std::vector<std::pair<Target, ExprPtr>> assigns;
  Body body;
};
struct FilterBlockStmt : Stmt {
  using Stmt::Stmt;
  ExprPtr filter;  // as in SetBlockStmt
  Body body;
};
struct BlockStmt : Stmt {  // a body rendered in place: transformers' {% generation %}
  using Stmt::Stmt;
  Body body;
};

// A parsed template and the normalized text its offsets refer to.
struct Program {
  std::string source;
  Body body;
};

}  // namespace hydragen::chat
