#pragma once
// What a forward pass lets an observer see or change, for the lab's
// experiments and the embedder's layer read-out. The production path reads
// like the model: with no hooks set it pays one pointer test per layer.
#include <cstdint>

namespace tally {

// How queries see keys. Causal is the model; the other two exist for the lab:
// DenseMasked computes every score of the chunk and masks afterwards (the
// textbook count), Unmasked lets queries see later keys (an encoder: wrong for
// a decoder, and it breaks what the cache relies on).
enum class AttentionMode { Causal, DenseMasked, Unmasked };

struct ForwardHooks {
  AttentionMode attention = AttentionMode::Causal;

  virtual ~ForwardHooks() = default;
  // The residual stream, (n_tokens, n_embd), after block `layer` (0: the
  // embeddings, n_layer: the last block, before the final norm).
  virtual void residual(int64_t /*layer*/, const float* /*x*/, int64_t /*n_tokens*/) {}
  // After each forward call: positions computed and (query, key) scores
  // computed, summed over heads and layers.
  virtual void computed(int64_t /*tokens*/, uint64_t /*scores*/) {}
};

}  // namespace tally
