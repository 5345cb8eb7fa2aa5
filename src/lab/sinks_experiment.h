#pragma once
// StreamingLLM's figure (Xiao et al. 2023) on our model: perplexity of a long
// text, per 1,000 tokens, when the cache holds
//   dense:      every position (until positions pass the trained context);
//   window:     the latest `window` positions (sinks = 0);
//   sinks N:    the first N tokens and the latest window - N positions;
//   recompute:  the latest window - 1 tokens, recomputed from scratch for
//               every token scored (sampled every `recompute_every` tokens);
// and what each costs per generated token. Perplexity is teacher-forced: the
// text's tokens go in one block of positions at a time, every position's
// logits scored against the next token.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"

namespace tally {

struct SinksRow {
  std::string config;          // "dense", "window", "sinks 4", "recompute"
  int64_t sinks = -1;
  std::vector<double> ppl;     // per segment of 1,000 scored tokens
  double ppl_all = 0;          // over the whole text
  double ppl_sampled = 0;      // at the positions the recompute baseline scores (comparable with it)
  int64_t scored = 0;          // tokens scored
  double decode_ms_per_token = 0;  // generating one token with this cache (recompute: one scoring)
};

struct SinksOptions {
  int64_t window = 1024;
  std::vector<int64_t> sinks{0, 1, 4, 8};
  int64_t recompute_every = 100;
  bool dense = true;
  int n_threads = 0;
};

std::vector<SinksRow> measure_sinks(const Model& model, std::span<const int32_t> text, const SinksOptions& o,
                                    const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace tally
