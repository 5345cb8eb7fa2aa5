#include "jinja/interpreter.h"

#include <fmt/format.h>

#include "jinja/builtins.h"

namespace tally::jinja {

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    const auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

Interpreter::~Interpreter() {
  for (const auto& w : namespaces_)
    if (auto ns = w.lock()) ns->clear();
}

void Interpreter::count_iterations(int64_t n) {
  iterations_ += n;
  if (iterations_ > limits_.max_loop_iterations)
    raise(fmt::format("the template ran more than {} loop iterations", limits_.max_loop_iterations));
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    raise(fmt::format("the rendering would exceed {} bytes", limits_.max_output_bytes));
}

Text Interpreter::render(const Body& body, const std::shared_ptr<Scope>& globals) {
  auto top = std::make_shared<Scope>();
  top->parent = globals;
  Text out;
  exec(body, top, out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Body& body, const std::shared_ptr<Scope>& scope, Text& out) {
  for (const auto& s : body) {
    const Flow f = exec_stmt(*s, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope, Text& out) {
  try {
    switch (s.kind) {
      case Stmt::Kind::Data:
        out.append(s.text);
        check_size(out.s.size());
        return Flow::Normal;
      case Stmt::Kind::Output: {
        const Value v = eval(*s.exprs[0], scope);
        append_str(out, v, limits_.max_output_bytes);
        check_size(out.s.size());
        return Flow::Normal;
      }
      case Stmt::Kind::If:
        for (size_t i = 0; i < s.exprs.size(); ++i)
          if (eval(*s.exprs[i], scope).truthy()) return exec(s.bodies[i], scope, out);
        if (s.has_else) return exec(s.bodies.back(), scope, out);
        return Flow::Normal;
      case Stmt::Kind::For: return exec_for(s, scope, out);
      case Stmt::Kind::Set: exec_set(s, scope); return Flow::Normal;
      case Stmt::Kind::SetBlock: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        Text t;
        exec(s.bodies[0], inner, t);
        scope->vars[s.targets[0]] = apply_filters(s.exprs, Value::string(std::move(t)), scope);
        return Flow::Normal;
      }
      case Stmt::Kind::Macro: scope->vars[s.name] = make_macro(s, scope, s.name); return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        const Expr& call = *s.exprs[0];
        const Value fn = eval(*call.kids[0], scope);
        CallArgs args = eval_args(call, scope);
        args.keyword.emplace_back("caller", make_macro(s, scope, "caller"));
        const Value v = this->call(fn, args);
        append_str(out, v, limits_.max_output_bytes);
        check_size(out.s.size());
        return Flow::Normal;
      }
      case Stmt::Kind::FilterBlock: {
        Text t;
        const Flow f = exec(s.bodies[0], scope, t);
        append_str(out, apply_filters(s.exprs, Value::string(std::move(t)), scope), limits_.max_output_bytes);
        check_size(out.s.size());
        return f;
      }
      case Stmt::Kind::With: {
        auto inner = std::make_shared<Scope>();
        inner->parent = scope;
        for (size_t i = 0; i < s.targets.size(); ++i) inner->vars[s.targets[i]] = eval(*s.exprs[i], scope);
        return exec(s.bodies[0], inner, out);
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
  } catch (const ValueError& e) {
    throw RenderError{e.message, s.line, s.col, false};
  } catch (const TemplateRaised& e) {
    throw RenderError{e.message, s.line, s.col, true};
  }
  return Flow::Normal;
}

void Interpreter::bind(Scope& scope, const std::vector<std::string>& names, bool unpack, const Value& v) {
  if (!unpack) {
    scope.vars[names[0]] = v;
    return;
  }
  if (!v.is_list() && !v.is_string() && !v.is_dict())
    raise(fmt::format("cannot unpack non-iterable {} object", v.type_name()));
  const std::vector<Value> items = iterate(v);
  if (items.size() != names.size())
    raise(items.size() > names.size() ? fmt::format("too many values to unpack (expected {})", names.size())
                                      : fmt::format("not enough values to unpack (expected {}, got {})", names.size(),
                                                    items.size()));
  for (size_t i = 0; i < names.size(); ++i) scope.vars[names[i]] = items[i];
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, Text& out) {
  std::vector<Value> items = iterate(eval(*s.exprs[0], scope));
  if (s.exprs[1]) {  // {% for x in xs if cond %}: the condition sees the item, not `loop`
    std::vector<Value> kept;
    for (Value& item : items) {
      count_iterations();
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      bind(*probe, s.targets, s.unpack, item);
      if (eval(*s.exprs[1], probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  auto state = std::make_shared<LoopState>();
  state->length = static_cast<int64_t>(items.size());
  const Value loop = Value::loop(state);
  for (size_t i = 0; i < items.size(); ++i) {
    count_iterations();
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    bind(*inner, s.targets, s.unpack, items[i]);
    state->index0 = static_cast<int64_t>(i);
    state->previtem = i > 0 ? items[i - 1] : Value::undefined("there is no previous item");
    state->nextitem = i + 1 < items.size() ? items[i + 1] : Value::undefined("there is no next item");
    inner->vars["loop"] = loop;
    if (exec(s.bodies[0], inner, out) == Flow::Break) break;
  }
  if (items.empty() && s.has_else) {
    auto inner = std::make_shared<Scope>();
    inner->parent = scope;
    exec(s.bodies[1], inner, out);
  }
  return Flow::Normal;
}

void Interpreter::exec_set(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  const Value v = eval(*s.exprs[0], scope);
  if (!s.ns_attr.empty()) {
    const Value* ns = scope->find(s.targets[0]);
    if (ns == nullptr || ns->kind() != Value::Kind::Namespace)
      raise(fmt::format("cannot assign attribute '{}' on '{}', which is not a namespace", s.ns_attr, s.targets[0]));
    if (s.ns_attr[0] == '_') raise(fmt::format("namespace attributes cannot start with '_' ('{}')", s.ns_attr));
    ns->mutable_object().set(Value::string(s.ns_attr), v);
    return;
  }
  bind(*scope, s.targets, s.unpack, v);
}

Value Interpreter::apply_filters(const std::vector<ExprPtr>& filters, Value v, const std::shared_ptr<Scope>& scope) {
  for (const auto& f : filters) {
    CallArgs args = eval_args(*f, scope);
    v = apply_filter(*this, f->name, v, args);
  }
  return v;
}

Value Interpreter::make_macro(const Stmt& s, const std::shared_ptr<Scope>& scope, const std::string& name) {
  auto fn = std::make_shared<Function>();
  fn->name = name;
  const Stmt* def = &s;
  std::weak_ptr<Scope> weak = scope;  // a macro stored in its own scope must not keep it alive
  fn->call = [def, weak, name](Interpreter& in, CallArgs& args) -> Value {
    std::shared_ptr<Scope> closure = weak.lock();
    if (!closure) raise(fmt::format("macro '{}' is called after its scope ended", name));
    if (++in.call_depth_ > in.limits_.max_call_depth) {
      --in.call_depth_;
      raise(fmt::format("macro calls nest deeper than {}", in.limits_.max_call_depth));
    }
    struct Depth {
      Interpreter& in;
      ~Depth() { --in.call_depth_; }
    } depth{in};
    auto local = std::make_shared<Scope>();
    local->parent = closure;
    const auto& params = def->params;
    std::vector<bool> bound(params.size(), false);
    std::vector<Value> extra;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        local->vars[params[i].name] = args.positional[i];
        bound[i] = true;
      } else {
        extra.push_back(args.positional[i]);
      }
    }
    if (!extra.empty() && !def->uses_varargs)
      raise(fmt::format("macro '{}' takes not more than {} argument(s)", name, params.size()));
    auto kwargs = std::make_shared<Object>();
    for (auto& [k, v] : args.keyword) {
      size_t j = 0;
      while (j < params.size() && params[j].name != k) ++j;
      if (j < params.size()) {
        if (bound[j]) raise(fmt::format("macro '{}' got multiple values for argument '{}'", name, k));
        local->vars[k] = v;
        bound[j] = true;
      } else if (k == "caller" && def->kind == Stmt::Kind::Macro) {
        local->vars["caller"] = v;
      } else if (def->uses_kwargs) {
        kwargs->set(Value::string(k), v);
      } else {
        raise(fmt::format("macro '{}' takes no keyword argument '{}'", name, k));
      }
    }
    for (size_t j = 0; j < params.size(); ++j) {
      if (bound[j]) continue;
      local->vars[params[j].name] = params[j].default_value
                                        ? in.eval(*params[j].default_value, local)
                                        : Value::undefined(fmt::format("parameter '{}' was not provided", params[j].name));
    }
    local->vars["varargs"] = Value::list(std::move(extra), true);
    local->vars["kwargs"] = Value::dict(std::move(kwargs));
    Text t;
    in.exec(def->bodies[0], local, t);
    return Value::string(std::move(t));
  };
  return Value::function(std::move(fn));
}

Value Interpreter::call(const Value& fn, CallArgs& args) {
  if (fn.kind() == Value::Kind::Function) return fn.fn().call(*this, args);
  if (fn.is_undefined()) fail_undefined(fn);
  raise(fmt::format("'{}' object is not callable", fn.type_name()));
}

CallArgs Interpreter::eval_args(const Expr& e, const std::shared_ptr<Scope>& scope) {
  CallArgs args;
  for (size_t i = 1; i < e.kids.size(); ++i) {
    Value v = eval(*e.kids[i], scope);
    const std::string& kw = e.kw_names[i - 1];
    if (kw.empty()) {
      args.positional.push_back(std::move(v));
    } else {
      args.keyword.emplace_back(kw, std::move(v));
    }
  }
  return args;
}

Value Interpreter::eval(const Expr& e, const std::shared_ptr<Scope>& scope) {
  try {
    return eval_inner(e, scope);
  } catch (const ValueError& err) {
    throw RenderError{err.message, e.line, e.col, false};
  } catch (const TemplateRaised& err) {
    throw RenderError{err.message, e.line, e.col, true};
  }
}

Value Interpreter::eval_inner(const Expr& e, const std::shared_ptr<Scope>& scope) {
  using K = Expr::Kind;
  switch (e.kind) {
    case K::Literal: return e.literal;
    case K::Name: {
      const Value* v = scope->find(e.name);
      return v ? *v : Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case K::List:
    case K::Tuple: {
      std::vector<Value> items;
      items.reserve(e.kids.size());
      for (const auto& k : e.kids) items.push_back(eval(*k, scope));
      return Value::list(std::move(items), e.kind == K::Tuple);
    }
    case K::Dict: {
      auto o = std::make_shared<Object>();
      for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
        Value k = eval(*e.kids[i], scope);
        o->set(k, eval(*e.kids[i + 1], scope));
      }
      return Value::dict(std::move(o));
    }
    case K::GetAttr: return get_attr(*this, eval(*e.kids[0], scope), e.name);
    case K::GetItem: {
      const Value obj = eval(*e.kids[0], scope);
      return get_item(*this, obj, eval(*e.kids[1], scope));
    }
    case K::Slice: {
      const Value obj = eval(*e.kids[0], scope);
      const Value a = e.kids[1] ? eval(*e.kids[1], scope) : Value::none();
      const Value b = e.kids[2] ? eval(*e.kids[2], scope) : Value::none();
      const Value c = e.kids[3] ? eval(*e.kids[3], scope) : Value::none();
      return get_slice(*this, obj, a, b, c);
    }
    case K::Call: {
      const Value fn = eval(*e.kids[0], scope);
      CallArgs args = eval_args(e, scope);
      return call(fn, args);
    }
    case K::Filter: {
      const Value v = e.kids[0] ? eval(*e.kids[0], scope) : Value::undefined();
      CallArgs args = eval_args(e, scope);
      return apply_filter(*this, e.name, v, args);
    }
    case K::Test: {
      const Value v = eval(*e.kids[0], scope);
      CallArgs args = eval_args(e, scope);
      return Value::boolean(apply_test(*this, e.name, v, args));
    }
    case K::Not: return Value::boolean(!eval(*e.kids[0], scope).truthy());
    case K::Neg:
    case K::Pos: return negate(eval(*e.kids[0], scope), e.kind == K::Neg);
    case K::Binary: {
      if (e.name == "and" || e.name == "or") {
        Value a = eval(*e.kids[0], scope);
        if (a.truthy() == (e.name == "or")) return a;
        return eval(*e.kids[1], scope);
      }
      const Value a = eval(*e.kids[0], scope);
      const Value b = eval(*e.kids[1], scope);
      return binary_op(*this, e.name, a, b);
    }
    case K::Compare: {
      Value left = eval(*e.kids[0], scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.kids[i + 1], scope);
        if (!compare(e.ops[i], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case K::CondExpr:
      if (eval(*e.kids[1], scope).truthy()) return eval(*e.kids[0], scope);
      if (e.kids[2]) return eval(*e.kids[2], scope);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
  }
  return Value::undefined();
}

}  // namespace tally::jinja
