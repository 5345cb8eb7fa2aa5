#pragma once
// Constrained output's flags, shared by `run` and `chat`: --json-schema FILE
// (JSON valid against the schema) or --grammar FILE (llama.cpp's GBNF). In
// `run` they shape the one output; in `chat` every reply.
#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "grammar/grammar.h"
#include "model_options.h"

namespace tally::cli {

struct ConstraintOptions {
  std::string json_schema, grammar;  // files

  bool on() const { return !json_schema.empty() || !grammar.empty(); }
  // Usage errors (exit 2): both given.
  void validate() const;
  // The grammar compiled for this model's vocabulary (none without a flag);
  // errors name the file and, for a schema, the JSON pointer.
  std::optional<grammar::Constraint> build(const LoadedModel& lm) const;
};

// Adds --json-schema and --grammar.
void add_constraint_options(CLI::App* cmd, ConstraintOptions& c);

}  // namespace tally::cli
