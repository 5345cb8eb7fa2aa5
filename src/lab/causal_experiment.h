#pragma once
// The seeds' invariance experiment on a real model: run N tokens, then the same
// N plus one, and compare what the first N positions produced (final hidden
// states, logits, every layer's K and V) with the causal mask on and off.
// With the mask nothing changes (so K/V may be cached); without it, every
// layer after the first already sees the new token.
#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace tally {

struct CausalLayerDiff {
  int64_t layer = 0;
  double masked_k = 0, masked_v = 0;      // max |diff| over the first N positions
  double unmasked_k = 0, unmasked_v = 0;
};

struct CausalReport {
  int64_t n_tokens = 0;              // N (the longer run has N + 1)
  double masked_max_diff = 0;        // max |diff| of hidden states and logits, mask on
  double unmasked_max_diff = 0;      // the same, mask off
  double masked_max_relative = 0;    // masked_max_diff / max |logit|
  double unmasked_max_relative = 0;
  std::vector<CausalLayerDiff> per_layer;
};

// tokens: the N + 1 tokens (N >= 1). Uses an f32 cache so that differences are
// the model's, not the cache format's.
CausalReport run_causal_experiment(const Model& model, std::span<const int32_t> tokens, int n_threads);

}  // namespace tally
