#include "runtime/speculation.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tally {

namespace {
constexpr double kDecay = 0.9;            // of the counts, per step: the recent steps count most
constexpr double kTimeWeight = 0.2;       // of the newest step in the time averages
constexpr double kPriorCostPerGuess = 0.1;  // a guess's cost in one-token steps, until measured
constexpr int64_t kProbeEvery = 16;       // steps between probes while speculation does not pay
}  // namespace

PromptLookup::PromptLookup(int ngram_min, int ngram_max) : ngram_min_(ngram_min), ngram_max_(ngram_max) {
  if (ngram_min < 1 || ngram_max < ngram_min) fail("prompt lookup n-grams must satisfy 1 <= min <= max, got {} and {}", ngram_min, ngram_max);
}

std::vector<int32_t> PromptLookup::propose(std::span<const int32_t> history, int64_t k) const {
  const int64_t len = static_cast<int64_t>(history.size());
  if (k < 1) return {};
  for (int64_t n = std::min<int64_t>(ngram_max_, len - 1); n >= ngram_min_; --n) {
    const auto tail = history.last(static_cast<size_t>(n));
    // The latest earlier occurrence that has at least one token after it.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), history.begin() + start)) continue;
      const int64_t from = start + n, count = std::min(k, len - from);
      return std::vector<int32_t>(history.begin() + from, history.begin() + from + count);
    }
  }
  return {};
}

DraftLength::DraftLength(int64_t k_max) : k_max_(k_max) {
  if (k_max < 1) fail("a draft of at least 1 token is needed, got {}", k_max);
}

double DraftLength::gain(int64_t k) const {
  const double r = acceptance();
  const double cost = t0_ > 0 && per_guess_ > 0 ? per_guess_ / t0_ : kPriorCostPerGuess;
  double tokens = 0, p = 1;
  for (int64_t i = 0; i <= k; ++i, p *= r) tokens += p;
  return tokens / (1 + cost * static_cast<double>(k));
}

int64_t DraftLength::next() {
  int64_t best = 0;
  double best_gain = 1;
  for (int64_t k = 1; k <= k_max_; ++k)
    if (const double g = gain(k); g > best_gain) best = k, best_gain = g;
  if (best > 0) {
    idle_ = 0;
    return best;
  }
  if (++idle_ < kProbeEvery) return 0;
  idle_ = 0;
  return 1;  // a probe: one guess, to see whether they are kept again
}

void DraftLength::record(int64_t proposed, int64_t accepted, double seconds) {
  if (seconds > 0) {
    auto average = [&](double& avg, double x) { avg = avg > 0 ? (1 - kTimeWeight) * avg + kTimeWeight * x : x; };
    if (proposed == 0)
      average(t0_, seconds);
    else if (t0_ > 0)
      average(per_guess_, std::max(0.0, seconds - t0_) / static_cast<double>(proposed));
  }
  if (proposed < 1) return;
  // Guesses are verified in order until one is rejected: accepted kept, and
  // one more tried when not all were kept.
  kept_ = kDecay * kept_ + static_cast<double>(accepted);
  tried_ = kDecay * tried_ + static_cast<double>(accepted + (accepted < proposed ? 1 : 0));
}

}  // namespace tally
