#pragma once
// Hyper-parameters of a decoder, read from GGUF metadata with the documented
// defaults. This is the one reader of them: the run path and the cache
// planner (sizing/) both call it, so they cannot disagree on a shape.
// Invariants after every reader: all sizes positive and at most 2^31,
// n_head % n_kv_head == 0; after from_gguf also rope_dims even and <= head_dim.
#include <cstdint>

#include "io/gguf.h"
#include "model/architecture.h"

namespace tally {

// Any real model is far below this; larger sizes are a typo or a corrupt
// file, and refusing them keeps every later product inside 64 bits.
inline constexpr int64_t kMaxModelDim = int64_t{1} << 31;

// What a KV cache must hold for a model, read from <arch>.block_count,
// .attention.head_count, .attention.head_count_kv (default: head_count) and
// .attention.key_length (default: embedding_length / head_count, which must
// divide exactly); .attention.value_length, when present, must equal the key
// length. Needs no vocabulary or tensors.
struct AttentionLayout {
  std::string arch;  // general.architecture
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  // Sliding-window attention: n_window_layers of the layers attend to the
  // last `window` positions only, so their cache needs no more. 0 and 0 when
  // every layer attends to the whole context.
  int64_t window = 0;
  int64_t n_window_layers = 0;
};
AttentionLayout read_attention_layout(const GgufFile& f);
// Whether layer `il` of an `arch` model with a sliding window uses it (the
// architecture's documented pattern; gemma3: il % 6 < 5, every sixth global).
bool is_window_layer(std::string_view arch, int64_t il);

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
  // Sliding-window layers (is_window_layer): a query at p sees keys from
  // p - window + 1; their RoPE base is rope_base_swa. window 0: none.
  int64_t window = 0;
  float rope_base_swa = 10000.0f;

  bool window_layer(int64_t il) const { return window > 0 && is_window_layer(arch->name, il); }

  int64_t q_dim() const { return n_head * head_dim; }
  int64_t kv_dim() const { return n_kv_head * head_dim; }
  int64_t group_size() const { return n_head / n_kv_head; }  // query heads per kv head

  static ModelConfig from_gguf(const GgufFile& f);
};

}  // namespace tally
