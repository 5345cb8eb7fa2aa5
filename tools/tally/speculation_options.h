#pragma once
// Speculative decoding's flags, shared by `run` and `chat`: where guesses
// come from (--speculate, --draft) and at most how many one step verifies
// (--draft-max). Off by default, as llama.cpp's tools are. A draft model is
// loaded beside the target with a session of its own (open_draft).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "model_options.h"
#include "runtime/generator.h"
#include "runtime/session.h"

namespace tally::cli {

struct SpeculationOptions {
  std::string mode;   // "lookup", "draft", "off"; empty: not given ("draft" with --draft, else "off")
  std::string draft_model;  // --draft: a name or a path
  int64_t draft_max = 0;  // 0: not given (kDefaultDraft with --speculate)
  int64_t draft_vocab = -1;  // -1: not given (kDefaultDraftVocab with a draft model)

  static constexpr int64_t kDefaultDraft = 8;

  std::string source() const { return !mode.empty() ? mode : draft_model.empty() ? "off" : "draft"; }
  bool on() const { return source() != "off"; }
  bool drafting() const { return source() == "draft"; }
  // Usage errors (exit 2): --draft-max without speculation, --speculate draft
  // without --draft, --draft with another source, --draft-vocab without a draft.
  void validate() const;
  // The rows of logits a step must return (k guesses + the next token), and the draft length.
  void apply(SessionOptions& s) const;
  void apply(GenerateOptions& g) const;
  // Usage error (exit 2) when a step's guesses and its next token do not fit a context of n_ctx.
  void check_context(int64_t n_ctx) const;
  int64_t draft() const { return on() ? (draft_max > 0 ? draft_max : kDefaultDraft) : 0; }
};

// Adds --speculate, --draft, --draft-max and --draft-vocab.
void add_speculation_options(CLI::App* cmd, SpeculationOptions& s);
// Adds --draft-vocab alone (serve, lab speculative), into `given` (-1: not given).
void add_draft_vocab_option(CLI::App* cmd, int64_t& given);
// The vocabulary a draft model guesses from: --draft-vocab's `given`, or
// kDefaultDraftVocab; 0 without a draft model. Usage error (exit 2) when
// --draft-vocab is given without one.
int64_t draft_vocab(int64_t given, bool drafting);

// Loads the draft model `draft` with the target's flags and refuses (naming
// --draft) one it cannot load or whose vocabulary is not the target's.
LoadedModel load_draft(const ModelOptions& m, const std::string& draft, const LoadedModel& target);

// A draft model and its session.
struct DraftRun {
  LoadedModel lm;
  std::unique_ptr<Session> session;
};

// With --draft: loads the draft model and opens its session with the
// target's context, cache type, threads and what is left of --kv-budget
// after the target's cache. Refuses (naming --draft) a model it cannot load,
// one whose vocabulary is not the target's, and a cache that does not fit.
// Without: null.
std::unique_ptr<DraftRun> open_draft(const SpeculationOptions& s, const ModelOptions& m, const LoadedModel& target,
                                     const Session& target_session);

}  // namespace tally::cli
