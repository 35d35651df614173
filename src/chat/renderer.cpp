#include "chat/renderer.h"

#include "chat/callable.h"
#include "chat/operators.h"
#include "chat/python_text.h"
#include "chat/source_position.h"

namespace hydragen::chat {

Renderer::Renderer(const Program& program, const RenderOptions& options) : program_(program), options_(options) {}

Renderer::~Renderer() {
  for (const auto& scope : closures_) scope->vars.clear();
}

std::string Renderer::render(const Dict& context) {
  auto top = std::make_shared<Scope>();
  for (const auto& [k, v] : context.entries()) {
    if (k.is_string()) top->set(k.str(), v);
  }
  std::string out;
  out_ = &out;
  exec(program_.body, top);
  top->vars.clear();
  return out;
}

void Renderer::fail(std::uint32_t offset, const std::string& message, bool raised) const {
  fail_at(program_.source, offset, message, raised);
}

void Renderer::step() {
  if (++steps_ > options_.limits.max_steps) {
    throw EvalError("the template did more than " + std::to_string(options_.limits.max_steps) +
                    " loop iterations and calls (RenderLimits::max_steps)");
  }
}

Value Renderer::text(std::string s, bool markup) const {
  if (s.size() > options_.limits.max_output_bytes) {
    throw EvalError("a string of " + std::to_string(s.size()) + " bytes passes the output limit of " +
                    std::to_string(options_.limits.max_output_bytes) + " bytes");
  }
  return Value(std::move(s), markup);
}

std::tm Renderer::now() const {
  if (options_.now) return options_.now();
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

void Renderer::emit(const std::string& text) {
  if (out_->size() + text.size() > options_.limits.max_output_bytes) {
    throw EvalError("the output passes the limit of " + std::to_string(options_.limits.max_output_bytes) +
                    " bytes (RenderLimits::max_output_bytes)");
  }
  *out_ += text;
}

std::string Renderer::capture(const Body& body, const std::shared_ptr<Scope>& scope) {
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  try {
    exec(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buffer;
}

Renderer::Flow Renderer::exec(const Body& body, const std::shared_ptr<Scope>& scope) {
  for (const StmtPtr& s : body) {
    const Flow f = exec_stmt(*s, scope);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Renderer::Flow Renderer::exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  Depth depth(*this, s.offset);
  try {
    switch (s.kind) {
      case StmtKind::Text: emit(static_cast<const TextStmt&>(s).text); break;
      case StmtKind::Output: emit(py_str(eval(*static_cast<const OutputStmt&>(s).expr, *scope))); break;
      case StmtKind::If: {
        const auto& st = static_cast<const IfStmt&>(s);
        for (const auto& [test, body] : st.branches) {
          if (eval(*test, *scope).truthy()) return exec(body, scope);
        }
        return exec(st.otherwise, scope);
      }
      case StmtKind::For: exec_for(static_cast<const ForStmt&>(s), scope); break;
      case StmtKind::Set: {
        const auto& st = static_cast<const SetStmt&>(s);
        assign(st.target, eval(*st.value, *scope), *scope);
        break;
      }
      case StmtKind::SetBlock: {
        const auto& st = static_cast<const SetBlockStmt&>(s);
        Value v = text(capture(st.body, scope));
        if (st.filter) v = apply_filter_chain(st.filter.get(), std::move(v), *scope);
        assign(st.target, v, *scope);
        break;
      }
      case StmtKind::Macro: {
        const auto& st = static_cast<const MacroStmt&>(s);
        auto c = std::make_shared<Callable>();
        c->kind = Callable::Kind::Macro;
        c->name = st.name;
        c->macro = &st;
        c->closure = scope;
        closures_.push_back(scope);
        scope->set(st.name, Value::callable(std::move(c)));
        break;
      }
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
      case StmtKind::With: {
        const auto& st = static_cast<const WithStmt&>(s);
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [target, value] : st.assigns) assign(target, eval(*value, *scope), *inner);
        return exec(st.body, inner);
      }
      case StmtKind::FilterBlock: {
        const auto& st = static_cast<const FilterBlockStmt&>(s);
        emit(py_str(apply_filter_chain(st.filter.get(), text(capture(st.body, scope)), *scope)));
        break;
      }
      case StmtKind::Block: return exec(static_cast<const BlockStmt&>(s).body, scope);
    }
  } catch (const RaisedError& e) {
    fail(s.offset, e.what(), true);
  } catch (const EvalError& e) {
    fail(s.offset, e.what());
  }
  return Flow::Normal;
}

void Renderer::exec_for(const ForStmt& s, const std::shared_ptr<Scope>& scope) {
  std::vector<Value> items = iterate(eval(*s.iterable, *scope));
  if (s.filter) {
    std::vector<Value> kept;
    for (Value& item : items) {
      step();
      Scope probe(scope);
      assign(s.target, item, probe);
      if (eval(*s.filter, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {  // the else block has a scope of its own, as the body has
    exec(s.otherwise, std::make_shared<Scope>(scope));
    return;
  }
  auto loop = std::make_shared<LoopData>();
  loop->items = std::move(items);
  const Value loop_value = Value::loop(loop);
  for (std::size_t i = 0; i < loop->items.size(); ++i) {
    step();
    loop->index0 = i;
    auto iteration = std::make_shared<Scope>(scope);
    iteration->set("loop", loop_value);
    assign(s.target, loop->items[i], *iteration);
    if (exec(s.body, iteration) == Flow::Break) break;
  }
}

void Renderer::assign(const Target& target, const Value& value, Scope& scope) {
  switch (target.kind) {
    case Target::Kind::Name: scope.set(target.name, value); return;
    case Target::Kind::NamespaceAttr: {
      const Value* ns = scope.find(target.name);
      if (ns == nullptr || !ns->is_namespace()) {
        throw EvalError("cannot set '" + target.name + "." + target.attr + "': '" + target.name + "' is not a namespace");
      }
      ns->ns().attrs.set(target.attr, value);
      return;
    }
    case Target::Kind::Tuple: {
      const std::vector<Value> items = iterate(value);
      if (items.size() != target.items.size()) {
        throw EvalError((items.size() > target.items.size() ? "too many values to unpack (expected "
                                                            : "not enough values to unpack (expected ") +
                        std::to_string(target.items.size()) + ", got " + std::to_string(items.size()) + ")");
      }
      for (std::size_t i = 0; i < items.size(); ++i) assign(target.items[i], items[i], scope);
      return;
    }
  }
}

Value Renderer::call_macro(const Callable& macro, const Args& args) {
  const MacroStmt& m = *macro.macro;
  if (++call_depth_ > options_.limits.max_call_depth) {
    --call_depth_;
    throw EvalError("macro calls nest deeper than " + std::to_string(options_.limits.max_call_depth) +
                    " (RenderLimits::max_call_depth)");
  }
  struct Leave {
    int& d;
    ~Leave() { --d; }
  } leave{call_depth_};
  const std::size_t n = m.params.size();
  if (args.positional.size() > n && !m.uses_varargs) {
    throw EvalError("macro '" + m.name + "' takes not more than " + std::to_string(n) + " argument(s)");
  }
  auto scope = std::make_shared<Scope>(macro.closure);
  std::vector<bool> given(n, false);
  for (std::size_t i = 0; i < n && i < args.positional.size(); ++i) {
    scope->set(m.params[i], args.positional[i]);
    given[i] = true;
  }
  Dict extra;
  for (const auto& [key, value] : args.keyword) {
    std::size_t i = args.positional.size();
    while (i < n && m.params[i] != key) ++i;
    if (i < n && !given[i]) {
      scope->set(key, value);
      given[i] = true;
    } else if (m.uses_kwargs) {
      extra.set(key, value);
    } else {
      throw EvalError("macro '" + m.name + "' takes no keyword argument '" + key + "'");
    }
  }
  const std::size_t first_default = n - m.defaults.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (given[i]) continue;
    scope->set(m.params[i], i >= first_default ? eval(*m.defaults[i - first_default], *scope)
                                               : Value::undefined("parameter '" + m.params[i] + "' was not provided"));
  }
  std::vector<Value> rest;
  for (std::size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
  scope->set("varargs", Value::list(std::move(rest), ListKind::Tuple));
  scope->set("kwargs", Value::dict(std::move(extra)));
  return text(capture(m.body, scope));
}

Value Renderer::apply_filter_chain(const Expr* filter, Value input, const Scope& scope) {
  const auto& f = static_cast<const FilterExpr&>(*filter);
  if (f.input) input = apply_filter_chain(f.input.get(), std::move(input), scope);
  Args args = eval_args(f.args, scope);
  step();
  return f.fn(*this, input, args);
}

}  // namespace hydragen::chat
