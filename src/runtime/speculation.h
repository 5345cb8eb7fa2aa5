#pragma once
// Drafts for speculative decoding: guesses of the next tokens that one step
// of the target model then verifies together (runtime/generator.h), so the
// weights are read once for several tokens while decoding is memory-bound.
//
// Prompt lookup guesses for free: when the last n tokens (n from ngram_max
// down to ngram_min) occurred before, in the prompt or in the text generated
// so far, the tokens that followed their latest occurrence are the guesses
// (code edits repeat much of the prompt). DraftLength picks how many to ask
// for from the recent acceptance: many while guesses are kept, one while they
// are not, and now and then none at all when almost nothing is kept, so that
// text unlike its prompt decodes nearly as fast as without speculation.
// Invariants: a proposal is never longer than asked; DraftLength::next() is
// in [0, k_max].
#include <cstdint>
#include <span>
#include <vector>

namespace tally {

class PromptLookup {
 public:
  explicit PromptLookup(int ngram_min = 2, int ngram_max = 4);
  // Up to k tokens that followed the latest earlier occurrence of history's
  // longest matching tail; empty when none matches.
  std::vector<int32_t> propose(std::span<const int32_t> history, int64_t k) const;

 private:
  int ngram_min_, ngram_max_;
};

class DraftLength {
 public:
  explicit DraftLength(int64_t k_max);
  // Guesses to ask for at the next step (0: decode without speculating).
  int64_t next();
  // How the last verification went.
  void record(int64_t proposed, int64_t accepted);
  double acceptance() const { return rate_; }

 private:
  int64_t k_max_;
  double rate_ = 0.5;   // recent accepted / proposed (an exponential average)
  int64_t skipped_ = 0; // steps without speculation since the last probe
};

}  // namespace tally
