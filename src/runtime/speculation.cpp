#include "runtime/speculation.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tally {

namespace {
constexpr double kRateWeight = 0.3;    // of the newest verification in the average
constexpr double kLowRate = 0.15;      // below this, speculate only to probe
constexpr int64_t kProbeEvery = 8;     // steps between probes at a low rate
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

int64_t DraftLength::next() {
  if (rate_ < kLowRate && ++skipped_ < kProbeEvery) return 0;
  skipped_ = 0;
  return std::clamp<int64_t>(1 + static_cast<int64_t>(std::floor(rate_ * static_cast<double>(k_max_))), 1, k_max_);
}

void DraftLength::record(int64_t proposed, int64_t accepted) {
  if (proposed < 1) return;
  rate_ = (1 - kRateWeight) * rate_ + kRateWeight * static_cast<double>(accepted) / static_cast<double>(proposed);
}

}  // namespace tally
