#pragma once
// Drafts for speculative decoding: guesses of the next tokens that one step
// of the target model then verifies together (runtime/generator.h), so the
// weights are read once for several tokens while decoding is memory-bound.
//
// Prompt lookup guesses for free: when the last n tokens (n from ngram_max
// down to ngram_min) occurred before, in the prompt or in the text generated
// so far, the tokens that followed their latest occurrence are the guesses
// (code edits repeat much of the prompt). DraftLength picks how many to ask
// for: the k that maximizes the tokens a step is expected to make over what
// the step costs. With a guess kept with probability r (each in turn, until
// one is rejected), a step with k guesses makes 1 + r + ... + r^k tokens; it
// costs t0 + s k, t0 a step of one token, s each guess more (both measured,
// as exponential averages of the steps' times). k = 0 when no k beats one
// token per t0, with a probe now and then to learn whether guesses got better.
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
  // How the last step went: guesses verified, kept, and the step's time
  // (seconds; <= 0 when not measured).
  void record(int64_t proposed, int64_t accepted, double seconds = 0);
  double acceptance() const { return kept_ / tried_; }
  // Tokens per unit of time with k guesses, relative to a step of one token.
  double gain(int64_t k) const;

 private:
  int64_t k_max_;
  double kept_ = 1, tried_ = 2;  // decayed counts of guesses kept and verified (a prior of 1 in 2)
  double t0_ = 0, per_guess_ = 0;  // seconds of a one-token step, and of each guess more (0: not measured)
  int64_t idle_ = 0;               // steps without speculation since the last probe
};

}  // namespace tally
