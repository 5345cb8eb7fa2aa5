#include "speculation_options.h"

#include "option_checks.h"
#include "usage.h"

namespace tally::cli {

namespace {
// A step verifies the next token and the guesses as one prefill: past a few
// dozen guesses, a step costs more than the tokens it could save.
constexpr int64_t kMaxDraft = 64;
}  // namespace

void add_speculation_options(CLI::App* cmd, SpeculationOptions& s) {
  cmd->add_option("--speculate", s.mode,
                  "Speculative decoding: 'lookup' guesses the continuation of the latest earlier occurrence of the "
                  "last tokens (prompt lookup) and verifies the guesses in one step; the output is what it would be "
                  "without (greedy: the same tokens; sampling: the same distribution); 'off'")
      ->capture_default_str()
      ->check(CLI::IsMember({"lookup", "off"}));
  cmd->add_option("--draft-max", s.draft_max,
                  "With --speculate: at most K guesses verified per step, fewer while guesses are not kept (default 8)")
      ->transform(integer_in(1, kMaxDraft));
}

void SpeculationOptions::validate() const {
  if (draft_max > 0 && !on()) usage_fail("--draft-max sets the guesses of --speculate lookup: give --speculate too");
}

void SpeculationOptions::apply(SessionOptions& s) const {
  if (on()) s.logit_rows = draft() + 1;
}

void SpeculationOptions::apply(GenerateOptions& g) const { g.draft_max = draft(); }

}  // namespace tally::cli
