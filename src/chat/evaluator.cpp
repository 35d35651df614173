// Renderer: evaluating expressions and calling callables.
#include "chat/builtins.h"
#include "chat/callable.h"
#include "chat/operators.h"
#include "chat/python_text.h"
#include "chat/renderer.h"

namespace hydragen::chat {

Value Renderer::eval(const Expr& e, const Scope& scope) {
  Depth depth(*this, e.offset);
  try {
    return eval_inner(e, scope);
  } catch (const RaisedError& err) {
    fail(e.offset, err.what(), true);
  } catch (const EvalError& err) {
    fail(e.offset, err.what());
  }
}

Value Renderer::lookup(const std::string& name, const Scope& scope) const {
  if (const Value* v = scope.find(name)) return *v;
  if (BuiltinFn fn = find_global(name)) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    c->builtin = fn;
    return Value::callable(std::move(c));
  }
  return Value::undefined("'" + name + "' is undefined");
}

Args Renderer::eval_args(const CallArgsExpr& a, const Scope& scope) {
  Args args;
  for (const ExprPtr& e : a.positional) args.positional.push_back(eval(*e, scope));
  if (a.star_args) {
    for (Value& v : iterate(eval(*a.star_args, scope))) args.positional.push_back(std::move(v));
  }
  for (const auto& [key, e] : a.keyword) args.keyword.emplace_back(key, eval(*e, scope));
  if (a.star_kwargs) {
    const Value kw = eval(*a.star_kwargs, scope);
    if (!kw.is_dict()) throw EvalError("argument after ** must be a mapping, not " + kw.type_name());
    for (const auto& [k, v] : kw.dict().entries()) {
      if (!k.is_string()) throw EvalError("keywords must be strings");
      args.keyword.emplace_back(k.str(), v);
    }
  }
  return args;
}

Value Renderer::eval_inner(const Expr& e, const Scope& scope) {
  switch (e.kind) {
    case ExprKind::Const: return static_cast<const ConstExpr&>(e).value;
    case ExprKind::Name: return lookup(static_cast<const NameExpr&>(e).name, scope);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      for (const ExprPtr& item : static_cast<const SeqExpr&>(e).items) items.push_back(eval(*item, scope));
      return Value::list(std::move(items), e.kind == ExprKind::List ? ListKind::List : ListKind::Tuple);
    }
    case ExprKind::Dict: {
      Dict d;
      for (const auto& [k, v] : static_cast<const DictExpr&>(e).items) {
        Value key = eval(*k, scope);
        d.set(std::move(key), eval(*v, scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::Getattr: {
      const auto& g = static_cast<const GetattrExpr&>(e);
      return get_attr(eval(*g.object, scope), g.attr);
    }
    case ExprKind::Getitem: {
      const auto& g = static_cast<const GetitemExpr&>(e);
      const Value obj = eval(*g.object, scope);
      if (g.index->kind == ExprKind::Slice) {
        const auto& s = static_cast<const SliceExpr&>(*g.index);
        auto bound = [&](const ExprPtr& b) { return b ? eval(*b, scope) : Value::none(); };
        const Value start = bound(s.start), stop = bound(s.stop), step_v = bound(s.step);
        return get_slice(obj, start, stop, step_v);
      }
      return get_item(obj, eval(*g.index, scope));
    }
    case ExprKind::Slice: throw EvalError("a slice is only valid inside []");
    case ExprKind::Call: {
      const auto& c = static_cast<const CallExpr&>(e);
      const Value callee = eval(*c.callee, scope);
      return call(callee, eval_args(c.args, scope));
    }
    case ExprKind::Filter: {
      const auto& f = static_cast<const FilterExpr&>(e);
      const Value input = eval(*f.input, scope);
      const Args args = eval_args(f.args, scope);
      step();
      return f.fn(*this, input, args);
    }
    case ExprKind::Test: {
      const auto& t = static_cast<const TestExpr&>(e);
      const Value input = eval(*t.input, scope);
      const Args args = eval_args(t.args, scope);
      return Value(t.fn(*this, input, args));
    }
    case ExprKind::Neg:
    case ExprKind::Pos:
      return negate(eval(*static_cast<const UnaryExpr&>(e).operand, scope), e.kind == ExprKind::Neg);
    case ExprKind::Not: return Value(!eval(*static_cast<const UnaryExpr&>(e).operand, scope).truthy());
    case ExprKind::Binary: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      const Value left = eval(*b.left, scope);
      return binary_op(b.op, left, eval(*b.right, scope), options_.limits);
    }
    case ExprKind::And:
    case ExprKind::Or: {
      const auto& b = static_cast<const BinaryExpr&>(e);
      Value left = eval(*b.left, scope);
      if (left.truthy() == (e.kind == ExprKind::Or)) return left;  // Python returns the deciding operand
      return eval(*b.right, scope);
    }
    case ExprKind::Compare: {
      const auto& c = static_cast<const CompareExpr&>(e);
      Value left = eval(*c.first, scope);
      for (const auto& [op, right_expr] : c.rest) {
        Value right = eval(*right_expr, scope);
        if (!compare_op(op, left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::Concat: {
      std::string out;
      for (const ExprPtr& part : static_cast<const ConcatExpr&>(e).parts) {
        out += py_str(eval(*part, scope));
        if (out.size() > options_.limits.max_output_bytes) text(std::move(out));  // throws
      }
      return Value(std::move(out));
    }
    case ExprKind::CondExpr: {
      const auto& c = static_cast<const CondExpr&>(e);
      if (eval(*c.test, scope).truthy()) return eval(*c.then, scope);
      if (c.otherwise) return eval(*c.otherwise, scope);
      return Value::undefined("the inline if-expression evaluated to false and has no else");
    }
  }
  return Value();
}

Value Renderer::call(const Value& callee, const Args& args) {
  if (callee.is_undefined()) throw EvalError(undefined_message(callee) + " (and was called)");
  if (!callee.is_callable()) throw EvalError("'" + callee.type_name() + "' object is not callable");
  step();
  const Callable& c = callee.callable();
  switch (c.kind) {
    case Callable::Kind::Builtin: return c.builtin(*this, args);
    case Callable::Kind::Method: return call_method(*this, c.self, c.name, args);
    case Callable::Kind::Macro: return call_macro(c, args);
  }
  return Value();
}

Value Renderer::apply_filter(const std::string& name, const Value& input, const Args& args) {
  FilterFn fn = find_filter(name);
  if (fn == nullptr) throw EvalError("no filter named '" + name + "'");
  step();
  return fn(*this, input, args);
}

bool Renderer::apply_test(const std::string& name, const Value& input, const Args& args) {
  TestFn fn = find_test(name);
  if (fn == nullptr) throw EvalError("no test named '" + name + "'");
  return fn(*this, input, args);
}

}  // namespace hydragen::chat
