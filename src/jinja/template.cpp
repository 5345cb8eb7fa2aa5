#include "jinja/template.h"

#include <fmt/format.h>

#include "core/printable.h"

#include "jinja/builtins.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"

namespace tally::jinja {
namespace {

// Messages quote template text and values: one printable line, bounded.
std::string one_line(const std::string& msg) {
  PrintableOptions o;
  o.max_bytes = 200;
  o.escape_quotes = false;
  return printable(msg, o);
}

}  // namespace

Template Template::parse(std::string_view source, std::string origin) {
  auto impl = std::make_shared<Impl>();
  impl->origin = std::move(origin);
  try {
    impl->body = jinja::parse(tokenize(source));
  } catch (const SyntaxError& e) {
    fail("{}: line {}, column {}: {}", impl->origin, e.line, e.col, one_line(e.message));
  }
  Template t;
  t.impl_ = std::move(impl);
  return t;
}

std::vector<Segment> Template::render(const std::vector<Variable>& vars, const RenderOptions& o) const {
  auto globals = std::make_shared<Scope>();
  add_globals(*globals);
  auto context = std::make_shared<Scope>();
  context->parent = globals;
  for (const Variable& v : vars) context->vars[v.name] = from_json(v.value, v.input);
  Text out;
  try {
    Interpreter in(o.limits, o.now ? *o.now : std::time(nullptr));
    out = in.render(impl_->body, context);
  } catch (const RenderError& e) {
    if (e.raised) throw TemplateError(one_line(e.message));
    fail("{}: line {}, column {}: {}", impl_->origin, e.line, e.col, one_line(e.message));
  }
  std::vector<Segment> segs;
  for (size_t i = 0; i < out.s.size();) {
    const bool in = out.from_input(i);
    size_t j = i + 1;
    while (j < out.s.size() && out.from_input(j) == in) ++j;
    segs.push_back({out.s.substr(i, j - i), in});
    i = j;
  }
  return segs;
}

namespace {

void collect(const Expr& e, std::vector<std::string>& out) {
  if (e.kind == Expr::Kind::Literal && e.literal.is_string()) out.push_back(e.literal.str());
  for (const auto& k : e.kids)
    if (k) collect(*k, out);
}

void collect(const Body& body, std::vector<std::string>& out) {
  for (const auto& s : body) {
    if (s->kind == Stmt::Kind::Data) out.push_back(s->text);
    for (const auto& e : s->exprs)
      if (e) collect(*e, out);
    for (const auto& p : s->params)
      if (p.default_value) collect(*p.default_value, out);
    for (const auto& b : s->bodies) collect(b, out);
  }
}

}  // namespace

std::vector<std::string> Template::literals() const {
  std::vector<std::string> out;
  collect(impl_->body, out);
  return out;
}

}  // namespace tally::jinja
