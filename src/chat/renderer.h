// The interpreter: runs a Program against a context and produces the prompt text. One
// Renderer per render call; the builtins reach it for limits, calls and nested filters.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/call_args.h"
#include "chat/scope.h"
#include "chat/template.h"
#include "chat/value.h"

namespace hydragen::chat {

class Renderer {
 public:
  Renderer(const Program& program, const RenderOptions& options);
  ~Renderer();  // breaks the reference cycles between macros and the scopes they close over
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;

  std::string render(const Dict& context);

  // --- for the builtins ---
  const RenderLimits& limits() const { return options_.limits; }
  void step();                                        // one unit of work, EvalError past max_steps
  Value text(std::string s, bool markup = false) const;  // a string, EvalError past max_output_bytes
  Value call(const Value& callee, const Args& args);
  Value apply_filter(const std::string& name, const Value& input, const Args& args);
  bool apply_test(const std::string& name, const Value& input, const Args& args);
  std::tm now() const;

 private:
  enum class Flow { Normal, Break, Continue };
  static constexpr int kMaxDepth = 1000;  // nested statements, expressions and macro bodies

  // Counts the nesting of exec and eval calls, so no template can exhaust the stack.
  struct Depth {
    Depth(Renderer& r, std::uint32_t offset) : r_(r) {
      if (++r_.depth_ > kMaxDepth) {
        --r_.depth_;
        r_.fail(offset, "rendering nests deeper than " + std::to_string(kMaxDepth) + " levels");
      }
    }
    ~Depth() { --r_.depth_; }
    Renderer& r_;
  };

  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope);
  Flow exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope);
  void exec_for(const ForStmt& s, const std::shared_ptr<Scope>& scope);
  std::string capture(const Body& body, const std::shared_ptr<Scope>& scope);
  void emit(const std::string& text);
  void assign(const Target& target, const Value& value, Scope& scope);
  Value call_macro(const Callable& macro, const Args& args);
  Value apply_filter_chain(const Expr* filter, Value input, const Scope& scope);

  Value eval(const Expr& e, const Scope& scope);
  Value eval_inner(const Expr& e, const Scope& scope);
  Args eval_args(const CallArgsExpr& a, const Scope& scope);
  Value lookup(const std::string& name, const Scope& scope) const;

  [[noreturn]] void fail(std::uint32_t offset, const std::string& message, bool raised = false) const;

  const Program& program_;
  const RenderOptions& options_;
  std::string* out_ = nullptr;
  std::size_t steps_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
  std::vector<std::shared_ptr<Scope>> closures_;  // scopes that macros defined in them hold
};

// Thrown by raise_exception(); the renderer turns it into a TemplateError with raised().
class RaisedError : public EvalError {
 public:
  using EvalError::EvalError;
};

}  // namespace hydragen::chat
