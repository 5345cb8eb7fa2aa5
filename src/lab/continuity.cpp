#include "lab/continuity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "runtime/session.h"

namespace tally {

ContinuityReport run_continuity_experiment(const Model& model, std::span<const int32_t> prompt, int64_t edit_at,
                                           int32_t replacement, int n_threads) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n < 2) fail("the continuity experiment needs a prompt of at least 2 tokens, got {}", n);
  if (edit_at < 0 || edit_at >= n) fail("edit position {} is outside the prompt [0, {})", edit_at, n);
  const int64_t V = model.config().n_vocab;
  SessionOptions o;
  o.n_ctx = n + 1;
  o.all_logits = true;
  o.n_threads = n_threads;
  Session s(model, o);
  ContinuityReport r;
  r.prompt_tokens = n;
  s.append(prompt);

  const int32_t tok = prompt[n - 1];
  for (int64_t wrong : {n - 1, n + 1}) {
    try {
      s.forward().eval(s.cache(), s.sequence(), std::span<const int32_t>(&tok, 1), wrong, LogitsMode::Last);
    } catch (const Error& e) {
      (wrong < n ? r.stale_start_refused : r.gap_start_refused) = s.cache().length(s.sequence()) == n;
      if (r.refusal_message.empty()) r.refusal_message = e.what();
    }
  }

  std::vector<int32_t> edited(prompt.begin(), prompt.end());
  edited[edit_at] = replacement;
  r.edit_at = edit_at;
  s.truncate(edit_at);
  const uint64_t before = s.forward().stats().tokens;
  std::vector<float> rolled;
  s.append(std::span<const int32_t>(edited).subspan(edit_at),
           [&](int64_t, const float* l, int64_t rows) { rolled.insert(rolled.end(), l, l + rows * V); });
  r.recomputed_positions = static_cast<int64_t>(s.forward().stats().tokens - before);

  Session fresh(model, o);
  std::vector<float> full;
  fresh.append(edited, [&](int64_t, const float* l, int64_t rows) { full.insert(full.end(), l, l + rows * V); });
  r.fresh_positions = static_cast<int64_t>(fresh.forward().stats().tokens);
  for (size_t i = 0; i < rolled.size(); ++i)
    r.max_logit_diff = std::max(r.max_logit_diff, static_cast<double>(std::fabs(rolled[i] - full[edit_at * V + i])));
  r.work_saved = 1.0 - static_cast<double>(r.recomputed_positions) / static_cast<double>(r.fresh_positions);
  return r;
}

}  // namespace tally
