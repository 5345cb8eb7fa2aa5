#pragma once
// Hyper-parameters of a decoder, read from GGUF metadata with the documented
// defaults. Invariants after from_gguf: all sizes positive, n_head % n_head_kv
// == 0, rope_dims even and <= head_dim.
#include <cstdint>

#include "io/gguf.h"
#include "model/architecture.h"

namespace tally {

struct ModelConfig {
  const Architecture* arch = nullptr;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t rope_dims = 0;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_head_kv * head_dim; }
  int64_t group_size() const { return n_head / n_head_kv; }  // query heads per kv head

  static ModelConfig from_gguf(const GgufFile& f);
};

}  // namespace tally
