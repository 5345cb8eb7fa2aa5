#pragma once
// The cache a run allocates, built in one place: the engine builds its cache
// from it and the planner (sizing/kv_plan.h) sizes "what `tally run` allocates"
// with it, so the two cannot drift apart.
#include <cstdint>
#include <vector>

#include "kv/kv_cache.h"

namespace tally {

// A pool of n_ctx positions in blocks of kDefaultBlockSize, of `type`, for
// `max_sequences` sequences that each take at most `step_tokens` positions
// a step (the window layers' pool holds that beside the window); window
// layers as given (window_layers[l], empty: none).
inline KvCacheOptions run_cache_options(int64_t n_ctx, DType type, int64_t window, std::vector<bool> window_layers,
                                        int64_t max_sequences = 1, int64_t step_tokens = kDefaultBatchTokens) {
  KvCacheOptions o;
  o.n_ctx = n_ctx;
  o.type = type;
  o.window = window;
  o.window_layers = std::move(window_layers);
  o.max_sequences = max_sequences < 1 ? 1 : max_sequences;
  o.max_batch = step_tokens < 1 ? 1 : (step_tokens < n_ctx ? step_tokens : n_ctx);
  return o;
}

}  // namespace tally
