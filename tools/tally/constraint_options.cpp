#include "constraint_options.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/text_file.h"
#include "option_checks.h"
#include "runtime/generation.h"
#include "usage.h"

namespace tally::cli {

void ConstraintOptions::validate() const {
  if (!json_schema.empty() && !grammar.empty()) usage_fail("--json-schema and --grammar both constrain the output: give one");
}

std::optional<grammar::Constraint> ConstraintOptions::build(const LoadedModel& lm) const {
  if (!on()) return std::nullopt;
  const grammar::Vocabulary vocab = grammar_vocabulary(*lm.tokenizer, static_cast<int32_t>(lm.model->config().n_vocab));
  if (!grammar.empty()) {
    const std::string text = read_text_file(grammar, "grammar file", kMaxTextBytes);
    try {
      return grammar::Constraint::gbnf(vocab, text);
    } catch (const Error& e) {
      fail("{}: {}", grammar, e.what());
    }
  }
  const std::string text = read_text_file(json_schema, "JSON schema file", kMaxTextBytes);
  nlohmann::ordered_json schema;  // in the file's order: properties are generated in it
  try {
    schema = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not JSON ({})", json_schema, e.what());
  }
  try {
    return grammar::Constraint::json_schema(vocab, schema);
  } catch (const Error& e) {
    fail("{}: {}", json_schema, e.what());
  }
}

void add_constraint_options(CLI::App* cmd, ConstraintOptions& c) {
  cmd->add_option("--json-schema", c.json_schema,
                  "Constrain the output to JSON valid against the JSON schema in FILE (docs/api.md lists the keywords)")
      ->check(nonempty_path());
  cmd->add_option("--grammar", c.grammar, "Constrain the output to the GBNF grammar in FILE (llama.cpp's format)")
      ->check(nonempty_path());
}

}  // namespace tally::cli
