#pragma once
// Constrained decoding: a grammar (JSON, a JSON schema, a GBNF grammar, or
// literal text and schemas in sequence) compiled against a model's
// vocabulary into token masks. The grammar engine is xgrammar (its adaptive
// token-mask cache makes a mask far cheaper than a forward step); it stays
// behind these types, which throw tally::Error only.
//
//   Vocabulary (once per model) -> Constraint (once per schema; immutable,
//   shared by every sequence that uses it) -> State (one per sequence)
//
// A State's mask allows exactly the tokens whose bytes keep the text a
// prefix of some sentence of the grammar, and the end-of-generation tokens
// only where the text is a whole sentence. Tokens with no text (control and
// unused tokens) and ids past the vocabulary's text are never allowed.
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tally::grammar {

// The token byte strings of a model, as the model's tokenizer decodes each
// token on its own (byte-exact; empty: a token with no text), the size of its
// logits (>= the number of strings: the padding rows are never allowed), and
// its end-of-generation ids. Immutable; copies share it (and the compiled
// grammars' cache, which is thread-safe).
class Vocabulary {
 public:
  Vocabulary(std::vector<std::string> token_bytes, int32_t n_logits, std::vector<int32_t> end_ids);
  int32_t n_logits() const;
  const std::vector<int32_t>& end_ids() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

// One piece of a sequence: literal text, or a value valid against a JSON schema.
struct Part {
  enum class Kind { Text, Schema };
  Kind kind = Kind::Text;
  std::string text;             // Kind::Text
  std::shared_ptr<const nlohmann::ordered_json> schema;  // Kind::Schema
  static Part literal(std::string text);
  static Part json_schema(const nlohmann::ordered_json& schema);
};

// A compiled grammar. Immutable and cheap to copy (copies share it).
class Constraint {
 public:
  // Any JSON object (OpenAI's response_format {"type": "json_object"}).
  static Constraint json_object(const Vocabulary& v);
  // A JSON value valid against `schema`, its properties in the schema's
  // order (hence ordered_json: the order the client wrote). Refused
  // (tally::Error naming the JSON pointer): a schema that is not a schema, a
  // keyword tally does not enforce, an empty enum, a schema no value can
  // satisfy. See check_schema.
  static Constraint json_schema(const Vocabulary& v, const nlohmann::ordered_json& schema);
  // llama.cpp's GBNF (root rule "root"); a syntax error names line and column.
  static Constraint gbnf(const Vocabulary& v, std::string_view text);
  // The parts one after the other (e.g. a tool call's markup around its arguments).
  static Constraint sequence(const Vocabulary& v, std::span<const Part> parts);
  // One or more sentences of sequence(parts), `separator` between each two
  // (a reply of several tool calls).
  static Constraint one_or_more(const Vocabulary& v, std::span<const Part> parts, std::string_view separator);

  // Whether `text` is a whole sentence of the grammar (tests, checks).
  bool matches(std::string_view text) const;
  const Vocabulary& vocabulary() const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit Constraint(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Throws tally::Error unless tally can enforce every keyword of `schema`
// exactly: each refusal names the JSON pointer of the keyword at fault.
void check_schema(const nlohmann::ordered_json& schema);

// Where one sequence is in a Constraint's grammar. Not thread-safe; movable.
class State {
 public:
  explicit State(const Constraint& c);
  State(State&&) noexcept;
  State& operator=(State&&) noexcept;
  ~State();

  // Sets every logit the grammar does not allow next to -infinity (logits:
  // the vocabulary's n_logits values). Returns how many tokens it allows.
  int64_t mask(std::span<float> logits);
  // Advances by one token; false (and unchanged) if the grammar refuses it.
  bool accept(int32_t token);
  // Advances by bytes as one step; false (and unchanged) if refused.
  bool accept_text(std::string_view bytes);
  // Undoes the last n accepted steps (n <= steps taken).
  void rollback(int n);
  // The text so far is a whole sentence: an end token is allowed.
  bool can_end() const;
  // An end token was accepted: nothing more is.
  bool finished() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tally::grammar
