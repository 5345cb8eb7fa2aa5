#include "grammar/grammar.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/printable.h"

namespace tally::grammar {

using json = nlohmann::ordered_json;

namespace {

// The engine's message without the source location it prefixes to what():
// its errors derive from std::runtime_error, whose own what() holds the text
// alone. One line, as tally's errors are.
std::string engine_message(const std::exception& e) {
  std::string m;
  if (const auto* r = dynamic_cast<const std::runtime_error*>(&e))
    m = r->std::runtime_error::what();
  else
    m = e.what();
  while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
  return printable(m, {.max_bytes = 400, .escape_quotes = false});
}

// Threads the compiler may use to build a grammar's mask cache.
int compile_threads() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)); }

// A literal as EBNF: a string with quotes and backslashes escaped, each
// control character a string of its own ("\u0001"), since the engine's
// lexer reads the hex digits after \u past the four an escape has.
std::string ebnf_literal(std::string_view text) {
  std::string s = "\"";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      s += '\\';
      s += c;
    } else if (u < 0x20 || u == 0x7f) {
      s += fmt::format("\" \"\\u{:04x}\" \"", u);
    } else {
      s += c;
    }
  }
  return s + "\"";
}

// llama.cpp's GBNF as the engine's EBNF: the same notation, except that GBNF
// allows an empty alternative (`ws ::= | " "`, `( | "x")`), which the engine
// spells "". Strings, character classes and comments are copied as they are.
// Each insertion is recorded (line, column in the output, length) so that an
// error's column can be given back in the text as written.
struct Insertion {
  int line, column, length;
};
std::string gbnf_to_ebnf(std::string_view g, std::vector<Insertion>& inserted) {
  std::string out;
  int line = 1, column = 1;  // of the next output byte
  out.reserve(g.size() + 16);
  size_t i = 0;
  const size_t n = g.size();
  auto is_name = [](char c) {
    return c == '_' || c == '-' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  // The next significant position after i (past spaces, newlines and comments).
  auto skip = [&](size_t j) {
    while (j < n) {
      if (g[j] == ' ' || g[j] == '\t' || g[j] == '\n' || g[j] == '\r') {
        ++j;
      } else if (g[j] == '#') {
        while (j < n && g[j] != '\n') ++j;
      } else {
        break;
      }
    }
    return j;
  };
  // Whether an alternative may not start at j: it is empty there.
  auto empty_at = [&](size_t j) {
    j = skip(j);
    if (j >= n || g[j] == '|' || g[j] == ')') return true;
    if (!is_name(g[j])) return false;
    size_t k = j;
    while (k < n && is_name(g[k])) ++k;
    k = skip(k);
    return g.substr(k, 3) == "::=";  // the next rule begins
  };
  auto put = [&](char c) {
    out += c;
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  };
  auto copy_quoted = [&](char close) {
    put(g[i++]);
    while (i < n && g[i] != close) {
      if (g[i] == '\\' && i + 1 < n) put(g[i++]);
      put(g[i++]);
    }
    if (i < n) put(g[i++]);
  };
  while (i < n) {
    const char c = g[i];
    if (c == '"') {
      copy_quoted('"');
    } else if (c == '[') {
      copy_quoted(']');
    } else if (c == '#') {
      while (i < n && g[i] != '\n') put(g[i++]);
    } else if (g.substr(i, 3) == "::=" || c == '|' || c == '(') {
      const size_t len = c == ':' ? 3 : 1;
      for (size_t k = 0; k < len; ++k) put(g[i++]);
      if (empty_at(i)) {
        inserted.push_back({line, column, 3});
        out += " \"\"";
        column += 3;
      }
    } else {
      put(g[i++]);
    }
  }
  return out;
}

// An engine message's "line L, column C" in the output of gbnf_to_ebnf, as a
// column of the text as written.
std::string unshift_column(std::string m, const std::vector<Insertion>& inserted) {
  const size_t at = m.find("at line ");
  if (at == std::string::npos) return m;
  int line = 0, column = 0;
  if (std::sscanf(m.c_str() + at, "at line %d, column %d", &line, &column) != 2) return m;
  int shift = 0;
  for (const Insertion& x : inserted)
    if (x.line == line && x.column < column) shift += std::min(x.length, column - x.column);
  const std::string old = fmt::format("at line {}, column {}", line, column);
  if (m.compare(at, old.size(), old) != 0) return m;
  return m.replace(at, old.size(), fmt::format("at line {}, column {}", line, column - shift));
}

}  // namespace

// ---- Vocabulary ----

struct Vocabulary::Impl {
  int32_t n_logits;
  std::vector<int32_t> end_ids;
  xgrammar::TokenizerInfo info;
  // Thread-safe, and caches compiled grammars (the same schema compiles once).
  mutable xgrammar::GrammarCompiler compiler;

  Impl(std::vector<std::string> tokens, int32_t n, std::vector<int32_t> ends)
      : n_logits(n),
        end_ids(std::move(ends)),
        info(tokens, xgrammar::VocabType::RAW, n, end_ids, false),
        compiler(info, compile_threads(), /*cache_enabled=*/true) {}
};

namespace {
std::shared_ptr<Vocabulary::Impl> make_vocabulary(std::vector<std::string> tokens, int32_t n_logits,
                                                  std::vector<int32_t> end_ids) {
  if (n_logits <= 0) fail("grammar vocabulary: {} logits", n_logits);
  if (tokens.size() > static_cast<size_t>(n_logits))
    fail("grammar vocabulary: {} tokens but only {} logits", tokens.size(), n_logits);
  for (int32_t id : end_ids)
    if (id < 0 || static_cast<size_t>(id) >= tokens.size())
      fail("grammar vocabulary: end token {} is outside the {} tokens", id, tokens.size());
  try {
    return std::make_shared<Vocabulary::Impl>(std::move(tokens), n_logits, std::move(end_ids));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("grammar vocabulary: {}", engine_message(e));
  }
}
}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, int32_t n_logits, std::vector<int32_t> end_ids)
    : impl_(make_vocabulary(std::move(token_bytes), n_logits, std::move(end_ids))) {}

int32_t Vocabulary::n_logits() const { return impl_->n_logits; }
const std::vector<int32_t>& Vocabulary::end_ids() const { return impl_->end_ids; }

// ---- Constraint ----

struct Constraint::Impl {
  Vocabulary vocab;
  xgrammar::CompiledGrammar compiled;
};

Part Part::literal(std::string text) {
  Part p;
  p.kind = Kind::Text;
  p.text = std::move(text);
  return p;
}

Part Part::json_schema(const json& schema) {
  Part p;
  p.kind = Kind::Schema;
  p.schema = std::make_shared<const json>(schema);
  return p;
}

namespace {

// Schemas as the engine reads them: whitespace between tokens allowed (as
// models write JSON) but at most 20 characters of it in a row, so that a
// model cannot pad forever; objects without additionalProperties take no
// other property.
constexpr int kMaxWhitespace = 20;

xgrammar::Grammar schema_grammar(const json& schema) {
  check_schema(schema);
  try {
    return xgrammar::Grammar::FromJSONSchema(schema.dump(), /*any_whitespace=*/true, std::nullopt, std::nullopt,
                                             /*strict_mode=*/true, kMaxWhitespace);
  } catch (const std::exception& e) {
    fail("JSON schema: {}", engine_message(e));
  }
}

template <class F>
xgrammar::CompiledGrammar compile(const char* what, F&& f) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("{}: {}", what, engine_message(e));
  }
}

}  // namespace

Constraint Constraint::json_object(const Vocabulary& v) {
  // Any object: the schema {"type": "object"} with other properties allowed
  // (the builtin JSON grammar would allow any value, and unbounded whitespace).
  const std::string schema = R"({"type": "object", "additionalProperties": true})";
  auto c = compile("JSON object grammar", [&] {
    return v.impl().compiler.CompileJSONSchema(schema, true, std::nullopt, std::nullopt, false, kMaxWhitespace);
  });
  return Constraint(std::make_shared<const Impl>(Impl{v, std::move(c)}));
}

Constraint Constraint::json_schema(const Vocabulary& v, const json& schema) {
  check_schema(schema);
  auto c = compile("JSON schema", [&] {
    return v.impl().compiler.CompileJSONSchema(schema.dump(), true, std::nullopt, std::nullopt, true, kMaxWhitespace);
  });
  return Constraint(std::make_shared<const Impl>(Impl{v, std::move(c)}));
}

Constraint Constraint::gbnf(const Vocabulary& v, std::string_view text) {
  std::vector<Insertion> inserted;
  const std::string ebnf = gbnf_to_ebnf(text, inserted);
  xgrammar::CompiledGrammar c = [&] {
    try {
      return v.impl().compiler.CompileGrammar(ebnf, "root");
    } catch (const std::exception& e) {
      fail("grammar: {}", unshift_column(engine_message(e), inserted));
    }
  }();
  return Constraint(std::make_shared<const Impl>(Impl{v, std::move(c)}));
}

namespace {

// The parts one after the other, as one grammar (not yet compiled).
xgrammar::Grammar concat_parts(std::span<const Part> parts) {
  if (parts.empty()) fail("grammar sequence: no parts");
  std::vector<xgrammar::Grammar> gs;
  for (const Part& p : parts) {
    if (p.kind == Part::Kind::Schema) {
      if (!p.schema) fail("grammar sequence: a schema part without a schema");
      gs.push_back(schema_grammar(*p.schema));
    } else if (!p.text.empty()) {
      try {
        gs.push_back(xgrammar::Grammar::FromEBNF("root ::= " + ebnf_literal(p.text)));
      } catch (const std::exception& e) {
        fail("grammar sequence: literal text: {}", engine_message(e));
      }
    }
  }
  if (gs.empty()) fail("grammar sequence: every part is empty");
  return gs.size() == 1 ? gs[0] : xgrammar::Grammar::Concat(gs);
}

}  // namespace

Constraint Constraint::sequence(const Vocabulary& v, std::span<const Part> parts) {
  const xgrammar::Grammar g = concat_parts(parts);
  auto c = compile("grammar sequence", [&] { return v.impl().compiler.CompileGrammar(g); });
  return Constraint(std::make_shared<const Impl>(Impl{v, std::move(c)}));
}

Constraint Constraint::one_or_more(const Vocabulary& v, std::span<const Part> parts, std::string_view separator) {
  const xgrammar::Grammar one = concat_parts(parts);
  // xgrammar composes grammars by concatenation and union only: the
  // repetition is a rule added to the printed grammar, whose root is "root".
  const std::string ebnf = one.ToString() + "\ntally_one_or_more ::= root (" + ebnf_literal(std::string(separator)) +
                           " root)*\n";
  auto c = compile("grammar repetition", [&] {
    return v.impl().compiler.CompileGrammar(xgrammar::Grammar::FromEBNF(ebnf, "tally_one_or_more"));
  });
  return Constraint(std::make_shared<const Impl>(Impl{v, std::move(c)}));
}

bool Constraint::matches(std::string_view text) const {
  State s(*this);
  if (!s.accept_text(text)) return false;
  return s.can_end();
}

const Vocabulary& Constraint::vocabulary() const { return impl_->vocab; }

// ---- State ----

struct State::Impl {
  xgrammar::GrammarMatcher matcher;
  int32_t n_logits;
  std::vector<int32_t> bits;  // the engine's bitmask: bit i of word i / 32 set = token i allowed
  DLTensor tensor{};
  int64_t shape = 0;

  explicit Impl(const Constraint& c)
      : matcher(c.impl().compiled), n_logits(c.vocabulary().n_logits()),
        bits(static_cast<size_t>(xgrammar::GetBitmaskSize(n_logits))) {
    shape = static_cast<int64_t>(bits.size());
    tensor.data = bits.data();
    tensor.device = DLDevice{kDLCPU, 0};
    tensor.ndim = 1;
    tensor.dtype = xgrammar::GetBitmaskDLType();
    tensor.shape = &shape;
    tensor.strides = nullptr;
    tensor.byte_offset = 0;
  }
};

State::State(const Constraint& c) : impl_(std::make_unique<Impl>(c)) {}
State::State(State&&) noexcept = default;
State& State::operator=(State&&) noexcept = default;
State::~State() = default;

int64_t State::mask(std::span<float> logits) {
  Impl& m = *impl_;
  if (logits.size() != static_cast<size_t>(m.n_logits))
    fail("grammar mask: {} logits, the vocabulary has {}", logits.size(), m.n_logits);
  if (m.matcher.IsTerminated()) fail("grammar mask: the grammar has ended (an end token was accepted)");
  try {
    m.matcher.FillNextTokenBitmask(&m.tensor);
  } catch (const std::exception& e) {
    fail("grammar mask: {}", engine_message(e));
  }
  constexpr float kNo = -std::numeric_limits<float>::infinity();
  int64_t allowed = 0;
  const size_t n = logits.size();
  for (size_t w = 0; w < m.bits.size(); ++w) {
    const auto word = static_cast<uint32_t>(m.bits[w]);
    const size_t base = w * 32;
    const size_t end = std::min(n, base + 32);
    if (word == 0xffffffffu && end - base == 32) {
      allowed += 32;
      continue;
    }
    for (size_t i = base; i < end; ++i)
      if ((word >> (i - base)) & 1u)
        ++allowed;
      else
        logits[i] = kNo;
  }
  return allowed;
}

bool State::accept(int32_t token) {
  if (token < 0 || token >= impl_->n_logits) return false;
  if (impl_->matcher.IsTerminated()) return false;
  try {
    return impl_->matcher.AcceptToken(token);
  } catch (const std::exception& e) {
    fail("grammar accept: {}", engine_message(e));
  }
}

bool State::accept_text(std::string_view bytes) {
  if (impl_->matcher.IsTerminated()) return false;
  try {
    return impl_->matcher.AcceptString(std::string(bytes));
  } catch (const std::exception& e) {
    fail("grammar accept: {}", engine_message(e));
  }
}

void State::rollback(int n) {
  if (n < 0) fail("grammar rollback: {} steps", n);
  try {
    impl_->matcher.Rollback(n);
  } catch (const std::exception& e) {
    fail("grammar rollback: {}", engine_message(e));
  }
}

bool State::can_end() const { return impl_->matcher.IsCompleted(); }
bool State::finished() const { return impl_->matcher.IsTerminated(); }

}  // namespace tally::grammar
