#pragma once
// Walks a parsed template and renders it (inside the jinja folder only; the
// public interface is template.h). Scoping follows jinja2: each loop
// iteration and each macro call gets a new scope whose parent is the
// enclosing one (a `set` there is not seen outside), `if` opens none, and a
// namespace's attributes are shared by every scope that sees it.
// Every loop iteration, call and string counts against the Limits.
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace tally::jinja {

struct Limits {
  size_t max_output_bytes = size_t{16} << 20;  // the rendering, and any one string or list built on the way
  int64_t max_loop_iterations = 1'000'000;     // over the whole render
  int max_call_depth = 100;                    // nested macro calls
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* find(const std::string& name) const;
};

// Thrown out of a render: a message and where in the template it happened.
// `raised` marks the template's own raise_exception().
struct RenderError {
  std::string message;
  int line = 0, col = 0;
  bool raised = false;
};

// raise_exception() inside a builtin: carried up to the render as is.
struct TemplateRaised {
  std::string message;
};

class Interpreter {
 public:
  Interpreter(const Limits& limits, std::time_t now) : limits_(limits), now_(now) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  Text render(const Body& body, const std::shared_ptr<Scope>& globals);

  size_t max_bytes() const { return limits_.max_output_bytes; }
  std::time_t now() const { return now_; }
  // Calls a function value (a macro, a builtin, a method).
  Value call(const Value& fn, CallArgs& args);
  void count_iterations(int64_t n = 1);
  void check_size(size_t bytes) const;
  // A namespace made during the render: emptied when the render ends, which
  // breaks any cycle through it (a namespace may hold itself).
  void track_namespace(const std::shared_ptr<Object>& ns) { namespaces_.push_back(ns); }

 private:
  enum class Flow { Normal, Break, Continue };

  Flow exec(const Body& body, const std::shared_ptr<Scope>& scope, Text& out);
  Flow exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope, Text& out);
  Flow exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, Text& out);
  void exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Value eval(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope);
  CallArgs eval_args(const Expr& e, const std::shared_ptr<Scope>& scope);
  Value make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope, const std::string& name);
  Value apply_filters(const std::vector<ExprPtr>& filters, Value v, const std::shared_ptr<Scope>& scope);
  void bind(Scope& scope, const std::vector<std::string>& names, bool unpack, const Value& v);

  Limits limits_;
  std::time_t now_;
  int64_t iterations_ = 0;
  int call_depth_ = 0;
  std::vector<std::weak_ptr<Object>> namespaces_;
};

}  // namespace tally::jinja
