#pragma once
// Perplexity of a token sequence: non-overlapping windows of ctx tokens, each
// evaluated from an empty cache; inside a window position p predicts token
// p + 1 (ctx - 1 predictions per window); the trailing partial window is
// dropped. ppl = exp(mean negative log-likelihood over all predictions).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/session.h"

namespace tally {

struct PerplexityResult {
  int64_t windows = 0;
  int64_t predictions = 0;
  double nll = 0;  // mean
  double ppl = 0;
  std::vector<double> window_nll;
};

// PRECONDITION: the session was made with all_logits and n_ctx >= ctx.
PerplexityResult perplexity(Session& s, std::span<const int32_t> tokens, int64_t ctx,
                            const std::function<void(const PerplexityResult&)>& on_window = {});

}  // namespace tally
