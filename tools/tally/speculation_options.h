#pragma once
// Speculative decoding's flags, shared by `run` and `chat`: where guesses
// come from (--speculate) and at most how many one step verifies
// (--draft-max). Off by default, as llama.cpp's tools are.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "runtime/generator.h"
#include "runtime/session.h"

namespace tally::cli {

struct SpeculationOptions {
  std::string mode = "off";  // "lookup" (prompt lookup) or "off"
  int64_t draft_max = 0;  // 0: not given (kDefaultDraft with --speculate)

  static constexpr int64_t kDefaultDraft = 8;

  bool on() const { return mode != "off"; }
  // Usage errors (exit 2): --draft-max without speculation.
  void validate() const;
  // The rows of logits a step must return (k guesses + the next token), and the draft length.
  void apply(SessionOptions& s) const;
  void apply(GenerateOptions& g) const;
  int64_t draft() const { return on() ? (draft_max > 0 ? draft_max : kDefaultDraft) : 0; }
};

// Adds --speculate and --draft-max.
void add_speculation_options(CLI::App* cmd, SpeculationOptions& s);

}  // namespace tally::cli
