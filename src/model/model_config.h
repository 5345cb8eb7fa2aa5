#pragma once
// Hyper-parameters of a decoder, read from GGUF metadata with the documented
// defaults; the attention shape by model_shape.h's shape_from_gguf, which the
// cache planner (sizing/) calls too, so the two cannot disagree on a shape.
// Invariants after every reader: all sizes positive and at most 2^31,
// n_head % n_kv_head == 0; after from_gguf also rope_dims even and <= head_dim.
#include <cstdint>
#include <vector>

#include "io/gguf.h"
#include "model/architecture.h"
#include "model/model_shape.h"

namespace tally {

struct ModelConfig {
  const Architecture* arch = nullptr;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t rope_dims = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  // Sliding-window layers (flagged in window_layers, model_shape.h): a query
  // at p sees keys from p - window + 1; their RoPE base is rope_base_swa.
  // window 0 and no flags: none.
  int64_t window = 0;
  std::vector<bool> window_layers;
  float rope_base_swa = 10000.0f;

  bool window_layer(int64_t il) const { return window > 0 && window_layers[static_cast<size_t>(il)]; }

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_kv_head * head_dim; }
  int64_t group_size() const { return n_head / n_kv_head; }  // query heads per kv head

  static ModelConfig from_gguf(const GgufFile& f);
};

}  // namespace tally
