#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tally {

PerplexityResult perplexity(Session& s, std::span<const int32_t> tokens, int64_t ctx,
                            const std::function<void(const PerplexityResult&)>& on_window) {
  if (ctx < 2) fail("perplexity needs windows of at least 2 tokens, got {}", ctx);
  if (ctx > s.n_ctx()) fail("perplexity window {} exceeds the session's context {}", ctx, s.n_ctx());
  PerplexityResult r;
  r.windows = static_cast<int64_t>(tokens.size()) / ctx;
  if (r.windows == 0) fail("{} tokens are fewer than one window of {}", tokens.size(), ctx);
  const int64_t V = s.model().config().n_vocab;
  double total = 0;
  for (int64_t w = 0; w < r.windows; ++w) {
    s.truncate(0);
    const auto window = tokens.subspan(w * ctx, ctx);
    double wsum = 0;
    s.append(window, [&](int64_t pos, const float* logits, int64_t rows) {
      for (int64_t i = 0; i < rows; ++i) {
        const int64_t p = pos + i;
        if (p + 1 >= ctx) continue;
        const float* row = logits + i * V;
        const float mx = *std::max_element(row, row + V);
        double sum = 0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
        wsum += std::log(sum) + mx - row[window[p + 1]];
      }
    });
    total += wsum;
    r.window_nll.push_back(wsum / (ctx - 1));
    r.predictions += ctx - 1;
    r.nll = total / r.predictions;
    r.ppl = std::exp(r.nll);
    if (on_window) on_window(r);
  }
  return r;
}

}  // namespace tally
