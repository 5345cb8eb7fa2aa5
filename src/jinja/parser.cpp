#include "jinja/parser.h"

#include <fmt/format.h>

#include <initializer_list>

#include "jinja/builtins.h"

namespace tally::jinja {
namespace {

using T = Token::Type;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body run() {
    Body body = subparse({});
    if (cur().type != T::Eof) fail(cur(), fmt::format("unexpected {}", describe(cur())));
    return body;
  }

 private:
  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loops_ = 0;                     // enclosing for loops (break/continue need one)
  std::vector<Stmt*> callables_;      // macros and call blocks being parsed
  std::vector<std::string> tag_stack_;

  struct Nest {
    explicit Nest(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting)
        p_.fail(p_.cur(), fmt::format("the template nests deeper than {} levels", kMaxNesting));
    }
    ~Nest() { --p_.depth_; }
    Parser& p_;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[std::min(i_ + 1, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }

  [[noreturn]] void fail(const Token& at, std::string msg) const { throw SyntaxError{std::move(msg), at.line, at.col}; }

  bool is_op(const char* op) const { return cur().type == T::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == T::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  const Token& expect_op(const char* op) {
    if (!is_op(op)) fail(cur(), fmt::format("expected '{}', got {}", op, describe(cur())));
    return next();
  }
  const Token& expect_name() {
    if (cur().type != T::Name) fail(cur(), fmt::format("expected a name, got {}", describe(cur())));
    return next();
  }
  void expect(T type, const char* what) {
    if (cur().type != type) fail(cur(), fmt::format("expected {}, got {}", what, describe(cur())));
    next();
  }

  static ExprPtr node(Expr::Kind k, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  static std::unique_ptr<Stmt> stmt(Stmt::Kind k, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = k;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // ---- statements ---------------------------------------------------------

  bool at_end_tag(std::initializer_list<const char*> ends) const {
    if (cur().type != T::Name) return false;
    for (const char* e : ends)
      if (cur().text == e) return true;
    return false;
  }

  Body subparse(std::initializer_list<const char*> ends) {
    Nest nest(*this);
    Body body;
    while (cur().type != T::Eof) {
      const Token& tok = cur();
      if (tok.type == T::Data) {
        auto s = stmt(Stmt::Kind::Data, tok);
        s->text = tok.text;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == T::VarBegin) {
        next();
        auto s = stmt(Stmt::Kind::Output, tok);
        s->exprs.push_back(parse_tuple(true, {}, false));
        expect(T::VarEnd, "'}}'");
        body.push_back(std::move(s));
      } else if (tok.type == T::BlockBegin) {
        next();
        if (ends.size() > 0 && at_end_tag(ends)) return body;
        body.push_back(parse_statement());
        expect(T::BlockEnd, "'%}'");
      } else {
        fail(tok, fmt::format("unexpected {}", describe(tok)));
      }
    }
    return body;
  }

  // After a statement's header: its block end, then the body up to one of
  // `ends` (left as the current token, or skipped when drop).
  Body parse_statements(std::initializer_list<const char*> ends, bool drop) {
    skip_op(":");
    expect(T::BlockEnd, "'%}'");
    const Token& start = cur();
    Body body = subparse(ends);
    if (cur().type == T::Eof) {
      std::string want;
      for (const char* e : ends) want += (want.empty() ? "'" : " or '") + std::string(e) + "'";
      fail(cur(), fmt::format("unexpected end of template: looking for {} to close the '{}' tag{}", want,
                              tag_stack_.empty() ? "" : tag_stack_.back(),
                              start.line ? fmt::format(" opened before line {}", start.line) : ""));
    }
    if (drop) next();
    return body;
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& tok = cur();
    if (tok.type != T::Name) fail(tok, fmt::format("expected a tag name, got {}", describe(tok)));
    const std::string tag = tok.text;
    tag_stack_.push_back(tag);
    std::unique_ptr<Stmt> s;
    if (tag == "if") s = parse_if();
    else if (tag == "for") s = parse_for();
    else if (tag == "set") s = parse_set();
    else if (tag == "macro") s = parse_macro();
    else if (tag == "call") s = parse_call_block();
    else if (tag == "filter") s = parse_filter_block();
    else if (tag == "with") s = parse_with();
    else if (tag == "print") {
      next();
      s = stmt(Stmt::Kind::Output, tok);
      s->exprs.push_back(parse_tuple(true, {}, false));
    } else if (tag == "break" || tag == "continue") {
      if (loops_ == 0) fail(tok, fmt::format("'{}' outside a for loop", tag));
      next();
      s = stmt(tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue, tok);
    } else if (tag == "generation") {
      next();
      s = stmt(Stmt::Kind::With, tok);  // renders its body as is
      s->bodies.push_back(parse_statements({"endgeneration"}, true));
    } else if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" || tag == "block" ||
               tag == "autoescape" || tag == "do" || tag == "trans") {
      fail(tok, fmt::format("the '{}' tag is not supported in chat templates", tag));
    } else if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif") {
      fail(tok, tag_stack_.size() > 1
                    ? fmt::format("unexpected '{}': the innermost open tag is '{}'", tag, tag_stack_[tag_stack_.size() - 2])
                    : fmt::format("unexpected '{}': no tag is open", tag));
    } else {
      fail(tok, fmt::format("unknown tag '{}'", tag));
    }
    tag_stack_.pop_back();
    return s;
  }

  std::unique_ptr<Stmt> parse_if() {
    auto s = stmt(Stmt::Kind::If, next());
    while (true) {
      s->exprs.push_back(parse_tuple(false, {}, false));
      s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
      const Token& t = next();
      if (t.text == "elif") continue;
      if (t.text == "else") {
        s->has_else = true;
        s->bodies.push_back(parse_statements({"endif"}, true));
      }
      break;
    }
    return s;
  }

  // Names, or a tuple of names, to assign to.
  void parse_targets(Stmt& s, std::initializer_list<const char*> extra_end) {
    bool parens = false;
    if (is_op("(")) {
      parens = true;
      next();
    }
    while (true) {
      const Token& n = expect_name();
      if (n.text == "true" || n.text == "false" || n.text == "none" || n.text == "True" || n.text == "False" ||
          n.text == "None")
        fail(n, fmt::format("cannot assign to '{}'", n.text));
      s.targets.push_back(n.text);
      if (!is_op(",")) break;
      s.unpack = true;
      next();
      if ((parens && is_op(")")) || at_end_tag(extra_end) || is_op("=")) break;
    }
    if (parens) {
      expect_op(")");
      s.unpack = true;
    }
  }

  std::unique_ptr<Stmt> parse_for() {
    auto s = stmt(Stmt::Kind::For, next());
    parse_targets(*s, {"in"});
    if (!skip_name("in")) fail(cur(), fmt::format("expected 'in', got {}", describe(cur())));
    s->exprs.push_back(parse_tuple(false, {"recursive"}, false));
    s->exprs.push_back(skip_name("if") ? parse_expression(true) : nullptr);
    if (is_name("recursive")) fail(cur(), "recursive loops are not supported");
    ++loops_;
    s->bodies.push_back(parse_statements({"endfor", "else"}, false));
    --loops_;
    if (next().text == "else") {
      s->has_else = true;
      s->bodies.push_back(parse_statements({"endfor"}, true));
    } else {
      s->bodies.emplace_back();
    }
    return s;
  }

  std::unique_ptr<Stmt> parse_set() {
    const Token& at = next();
    auto s = stmt(Stmt::Kind::Set, at);
    if (cur().type == T::Name && look().type == T::Op && look().text == ".") {
      s->targets.push_back(next().text);
      next();
      s->ns_attr = expect_name().text;
    } else {
      parse_targets(*s, {});
    }
    if (skip_op("=")) {
      s->exprs.push_back(parse_tuple(true, {}, false));
      return s;
    }
    if (s->unpack) fail(cur(), "a block set assigns to one name");
    s->kind = Stmt::Kind::SetBlock;
    while (is_op("|")) {
      next();
      s->exprs.push_back(parse_filter_call(nullptr, cur()));
    }
    s->bodies.push_back(parse_statements({"endset"}, true));
    return s;
  }

  void parse_signature(Stmt& s) {
    expect_op("(");
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (is_op(")")) break;  // trailing comma
      MacroParam p;
      p.name = expect_name().text;
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
      } else if (!s.params.empty() && s.params.back().default_value) {
        fail(cur(), "a parameter without a default follows one with a default");
      }
      s.params.push_back(std::move(p));
    }
    next();
  }

  std::unique_ptr<Stmt> parse_macro() {
    auto s = stmt(Stmt::Kind::Macro, next());
    s->name = expect_name().text;
    parse_signature(*s);
    callables_.push_back(s.get());
    const int loops = loops_;
    loops_ = 0;
    s->bodies.push_back(parse_statements({"endmacro"}, true));
    loops_ = loops;
    callables_.pop_back();
    return s;
  }

  std::unique_ptr<Stmt> parse_call_block() {
    auto s = stmt(Stmt::Kind::CallBlock, next());
    if (is_op("(")) parse_signature(*s);
    const Token& at = cur();
    ExprPtr call = parse_expression(true);
    if (call->kind != Expr::Kind::Call) fail(at, "expected a call after 'call'");
    s->exprs.push_back(std::move(call));
    callables_.push_back(s.get());
    const int loops = loops_;
    loops_ = 0;
    s->bodies.push_back(parse_statements({"endcall"}, true));
    loops_ = loops;
    callables_.pop_back();
    return s;
  }

  std::unique_ptr<Stmt> parse_filter_block() {
    auto s = stmt(Stmt::Kind::FilterBlock, next());
    s->exprs.push_back(parse_filter_call(nullptr, cur()));
    while (is_op("|")) {
      next();
      s->exprs.push_back(parse_filter_call(nullptr, cur()));
    }
    s->bodies.push_back(parse_statements({"endfilter"}, true));
    return s;
  }

  std::unique_ptr<Stmt> parse_with() {
    auto s = stmt(Stmt::Kind::With, next());
    while (cur().type != T::BlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_name().text);
      expect_op("=");
      s->exprs.push_back(parse_expression(true));
    }
    s->bodies.push_back(parse_statements({"endwith"}, true));
    return s;
  }

  // ---- expressions --------------------------------------------------------

  bool is_tuple_end(std::initializer_list<const char*> extra) const {
    if (cur().type == T::VarEnd || cur().type == T::BlockEnd || cur().type == T::Eof) return true;
    if (is_op(")")) return true;
    return at_end_tag(extra);
  }

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra, bool explicit_parens) {
    const Token& at = cur();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      args.push_back(parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail(cur(), fmt::format("expected an expression, got {}", describe(cur())));
    }
    auto e = node(Expr::Kind::Tuple, at);
    e->kids = std::move(args);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Nest nest(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token& at = next();
      auto c = node(Expr::Kind::CondExpr, at);
      c->kids.push_back(std::move(e));
      c->kids.push_back(parse_or());
      c->kids.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const char* op, const Token& at, ExprPtr l, ExprPtr r) {
    auto e = node(Expr::Kind::Binary, at);
    e->name = op;
    e->kids.push_back(std::move(l));
    e->kids.push_back(std::move(r));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      e = binary("or", at, std::move(e), parse_and());
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      e = binary("and", at, std::move(e), parse_not());
    }
    return e;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Nest nest(*this);
      const Token& at = next();
      auto e = node(Expr::Kind::Not, at);
      e->kids.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr first = parse_math1();
    ExprPtr e;
    while (true) {
      std::string op;
      if (cur().type == T::Op && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                  cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && look().type == T::Name && look().text == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!e) {
        e = node(Expr::Kind::Compare, at);
        e->kids.push_back(std::move(first));
      }
      e->ops.push_back(op);
      e->kids.push_back(parse_math1());
    }
    return e ? std::move(e) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      e = binary(at.text == "+" ? "+" : "-", at, std::move(e), parse_concat());
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      e = binary("~", at, std::move(e), parse_math2());
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      const char* op = at.text == "*" ? "*" : at.text == "/" ? "/" : at.text == "//" ? "//" : "%";
      e = binary(op, at, std::move(e), parse_pow());
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      e = binary("**", at, std::move(e), parse_unary(true));
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& at = next();
      e = node(at.text == "-" ? Expr::Kind::Neg : Expr::Kind::Pos, at);
      e->kids.push_back(parse_unary(false));
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    switch (tok.type) {
      case T::Name: {
        next();
        auto e = node(Expr::Kind::Literal, tok);
        if (tok.text == "true" || tok.text == "True") {
          e->literal = Value::boolean(true);
        } else if (tok.text == "false" || tok.text == "False") {
          e->literal = Value::boolean(false);
        } else if (tok.text == "none" || tok.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = Expr::Kind::Name;
          e->name = tok.text;
          for (Stmt* c : callables_) {
            if (tok.text == "caller") c->uses_caller = true;
            if (tok.text == "varargs") c->uses_varargs = true;
            if (tok.text == "kwargs") c->uses_kwargs = true;
          }
        }
        return e;
      }
      case T::String: {
        std::string s;
        while (cur().type == T::String) s += next().text;  // adjacent literals join
        auto e = node(Expr::Kind::Literal, tok);
        e->literal = Value::string(std::move(s));
        return e;
      }
      case T::Int:
      case T::Float: {
        next();
        auto e = node(Expr::Kind::Literal, tok);
        e->literal = tok.type == T::Int ? Value::integer(tok.int_value) : Value::number(tok.float_value);
        return e;
      }
      case T::Op:
        if (tok.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (tok.text == "[") return parse_list();
        if (tok.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail(tok, fmt::format("unexpected {}", describe(tok)));
  }

  ExprPtr parse_list() {
    auto e = node(Expr::Kind::List, next());
    while (!is_op("]")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op("]")) break;
      e->kids.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    auto e = node(Expr::Kind::Dict, next());
    while (!is_op("}")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op("}")) break;
      e->kids.push_back(parse_expression(true));
      expect_op(":");
      e->kids.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        e = parse_filter_call(std::move(e), cur());
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj) {
    Nest nest(*this);
    const Token& tok = next();
    if (tok.text == ".") {
      const Token& attr = cur();
      if (attr.type == T::Name) {
        next();
        auto e = node(Expr::Kind::GetAttr, tok);
        e->kids.push_back(std::move(obj));
        e->name = attr.text;
        return e;
      }
      if (attr.type != T::Int) fail(attr, "expected a name or a number after '.'");
      next();
      auto e = node(Expr::Kind::GetItem, tok);
      e->kids.push_back(std::move(obj));
      auto k = node(Expr::Kind::Literal, attr);
      k->literal = Value::integer(attr.int_value);
      e->kids.push_back(std::move(k));
      return e;
    }
    // '['
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.empty()) fail(tok, "expected an index or a slice inside []");
    if (args.size() > 1)
      for (const auto& a : args)
        if (a->kind == Expr::Kind::Slice) fail(tok, "a slice inside a tuple of indexes is not supported");
    ExprPtr key;
    if (args.size() == 1) {
      key = std::move(args[0]);
    } else {
      key = node(Expr::Kind::Tuple, tok);
      key->kids = std::move(args);
    }
    if (key->kind == Expr::Kind::Slice) {
      key->kids[0] = std::move(obj);
      return key;
    }
    auto e = node(Expr::Kind::GetItem, tok);
    e->kids.push_back(std::move(obj));
    e->kids.push_back(std::move(key));
    return e;
  }

  // An index, or a slice a:b:c (returned as a Slice whose kids[0] is left
  // for the caller to fill with the object).
  ExprPtr parse_subscribed() {
    const Token& at = cur();
    ExprPtr first;
    if (!is_op(":")) {
      first = parse_expression(true);
      if (!is_op(":")) return first;
    }
    auto s = node(Expr::Kind::Slice, at);
    s->kids.push_back(nullptr);
    s->kids.push_back(std::move(first));
    next();  // ':'
    s->kids.push_back(is_op("]") || is_op(",") || is_op(":") ? nullptr : parse_expression(true));
    ExprPtr step;
    if (skip_op(":")) step = is_op("]") || is_op(",") ? nullptr : parse_expression(true);
    s->kids.push_back(std::move(step));
    return s;
  }

  // Arguments "( a, b, k=v )" into e->kids / e->kw_names.
  void parse_call_args(Expr& e) {
    const Token& open = expect_op("(");
    bool need_comma = false;
    bool seen_kw = false;
    while (!is_op(")")) {
      if (need_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail(cur(), "*args and **kwargs in calls are not supported");
      if (cur().type == T::Name && look().type == T::Op && look().text == "=") {
        std::string key = next().text;
        next();
        e.kids.push_back(parse_expression(true));
        e.kw_names.push_back(std::move(key));
        seen_kw = true;
      } else {
        if (seen_kw) fail(cur(), "a positional argument follows a keyword argument");
        e.kids.push_back(parse_expression(true));
        e.kw_names.emplace_back();
      }
      need_comma = true;
    }
    (void)open;
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    Nest nest(*this);
    auto e = node(Expr::Kind::Call, cur());
    e->kids.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_call(ExprPtr operand, const Token& at) {
    Nest nest(*this);
    std::string name = expect_name().text;
    while (is_op(".")) {
      next();
      name += "." + expect_name().text;
    }
    if (!has_filter(name)) fail(at, fmt::format("no filter named '{}'", name));
    auto e = node(Expr::Kind::Filter, at);
    e->name = name;
    e->kids.push_back(std::move(operand));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr operand) {
    Nest nest(*this);
    const Token& at = next();  // 'is'
    const bool negated = skip_name("not");
    const Token& name_tok = cur();
    std::string name = expect_name().text;
    while (is_op(".")) {
      next();
      name += "." + expect_name().text;
    }
    if (!has_test(name)) fail(name_tok, fmt::format("no test named '{}'", name));
    auto e = node(Expr::Kind::Test, at);
    e->name = name;
    e->kids.push_back(std::move(operand));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == T::Name || cur().type == T::String || cur().type == T::Int ||
                cur().type == T::Float || is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(cur(), "tests cannot be chained with 'is'");
      ExprPtr arg = parse_postfix(parse_primary());
      e->kids.push_back(std::move(arg));
      e->kw_names.emplace_back();
    }
    if (!negated) return e;
    auto n = node(Expr::Kind::Not, at);
    n->kids.push_back(std::move(e));
    return n;
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).run(); }

}  // namespace tally::jinja
