#include "lab/continuity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
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
  ContinuityReport r;
  r.prompt_tokens = n;
  {
    // A forward pass over a cache of its own, asked to write one token at a
    // stale and at a gapped position: the cache must refuse both and keep its n.
    ThreadPool pool(n_threads > 0 ? n_threads : ThreadPool::default_threads());
    const auto& c = model.config();
    KvCache cache({c.n_layer, c.n_kv_head, c.head_dim}, KvCacheOptions{n + 1, 32, DType::F16, 0});
    Forward f(model, pool, n, n + 1, 1);
    const KvCache::SeqId seq = cache.create_sequence();
    f.eval(cache, seq, prompt, 0, LogitsMode::None);
    const int32_t tok = prompt[n - 1];
    for (int64_t wrong : {n - 1, n + 1}) {
      try {
        f.eval(cache, seq, std::span<const int32_t>(&tok, 1), wrong, LogitsMode::Last);
      } catch (const Error& e) {
        (wrong < n ? r.stale_start_refused : r.gap_start_refused) = cache.length(seq) == n;
        if (r.refusal_message.empty()) r.refusal_message = e.what();
      }
    }
  }

  // The edit: roll back to edit_at and recompute from there, counting positions.
  struct Count : ForwardHooks {
    int64_t tokens = 0;
    void computed(int64_t n_tokens, uint64_t) override { tokens += n_tokens; }
  };
  Count edit_count, fresh_count;
  Session s(model, o);
  s.set_hooks(&edit_count);
  s.append(prompt);
  std::vector<int32_t> edited(prompt.begin(), prompt.end());
  edited[edit_at] = replacement;
  r.edit_at = edit_at;
  s.truncate(edit_at);
  const int64_t before = edit_count.tokens;
  std::vector<float> rolled;
  s.append(std::span<const int32_t>(edited).subspan(edit_at),
           [&](int64_t, const float* l, int64_t rows) { rolled.insert(rolled.end(), l, l + rows * V); });
  r.recomputed_positions = edit_count.tokens - before;

  Session fresh(model, o);
  fresh.set_hooks(&fresh_count);
  std::vector<float> full;
  fresh.append(edited, [&](int64_t, const float* l, int64_t rows) { full.insert(full.end(), l, l + rows * V); });
  r.fresh_positions = fresh_count.tokens;
  for (size_t i = 0; i < rolled.size(); ++i)
    r.max_logit_diff = std::max(r.max_logit_diff, static_cast<double>(std::fabs(rolled[i] - full[edit_at * V + i])));
  r.work_saved = 1.0 - static_cast<double>(r.recomputed_positions) / static_cast<double>(r.fresh_positions);
  return r;
}

}  // namespace tally
