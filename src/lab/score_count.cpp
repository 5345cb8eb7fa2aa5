#include "lab/score_count.h"

#include "core/error.h"
#include "runtime/session.h"
#include "sampler/sampler.h"

namespace tally {

uint64_t sum_of_squares(int64_t n) {
  const auto u = static_cast<uint64_t>(n);
  return u * (u + 1) * (2 * u + 1) / 6;
}

uint64_t triangular(int64_t n) {
  const auto u = static_cast<uint64_t>(n);
  return u * (u + 1) / 2;
}

ScoreCounts score_formulas(int64_t n) {
  if (n < 1 || n > 10'000'000) fail("-n must be between 1 and 10000000, got {}", n);
  ScoreCounts c;
  c.n = n;
  c.recompute_formula = sum_of_squares(n);
  c.cached_formula = triangular(n);
  return c;
}

uint64_t measure_scores(const Model& model, int32_t first, int64_t n, bool use_cache, int n_threads,
                        const std::function<void(int64_t done, int64_t total)>& progress) {
  const auto& c = model.config();
  SessionOptions o;
  o.n_ctx = n;
  o.n_threads = n_threads;
  Session s(model, o);
  // Counts the scores the attention computes; without the cache it scores the whole chunk, then masks.
  struct Count : ForwardHooks {
    uint64_t scores = 0;
    void computed(int64_t, uint64_t n) override { scores += n; }
  } count;
  count.attention = use_cache ? AttentionMode::Causal : AttentionMode::DenseMasked;
  s.set_hooks(&count);
  std::vector<int32_t> seq{first};
  for (int64_t k = 1; k <= n; ++k) {  // step k writes token k: the sequence holds k tokens afterwards
    std::span<const float> logits;
    if (use_cache) {
      logits = s.append(std::span<const int32_t>(&seq.back(), 1));
    } else {
      s.truncate(0);
      logits = s.append(seq);
    }
    if (k < n) seq.push_back(argmax(logits));
    if (progress) progress(use_cache ? k : k * (k + 1) / 2, use_cache ? n : n * (n + 1) / 2);
  }
  return count.scores / static_cast<uint64_t>(c.n_head * c.n_layer);
}

}  // namespace tally
