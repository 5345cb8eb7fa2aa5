#pragma once
// The shape of a model's attention (what its KV cache holds) and, when the
// source tells, what its weights weigh. One struct for every reader: a GGUF
// file (here, the model's own reader), a Hugging Face config.json and
// explicit sizes (sizing/). Invariants after every reader: layers, heads,
// kv heads and head_dim positive; heads a multiple of kv heads;
// window_layers empty (no sliding window, window 0) or one flag per layer
// with at least one set (window > 0).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/checked_math.h"  // kMaxModelDim
#include "kv/kv_shape.h"

namespace tally {

class GgufFile;

struct ModelShape {
  std::string source;  // the file read, or "flags"
  std::string kind;    // architecture / model_type, "" when given by flags
  bool text_config = false;  // the shape came from a vision-language config's text_config
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  // Sliding-window attention: the layers flagged here attend to the last
  // `window` positions only, so their cache needs no more.
  int64_t window = 0;
  std::vector<bool> window_layers;
  // The other sizes, when a config.json gives them (0 otherwise): what the
  // parameter count of a dense decoder needs (sizing/hf_config.h).
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_vocab = 0;
  // Known from a GGUF with tensors (their element count and bytes), or from a
  // config (computed parameters x bytes of its dtype); absent otherwise.
  std::optional<uint64_t> parameters;
  std::optional<uint64_t> weights_bytes;
  std::string weights_dtype;  // the config's dtype name ("bfloat16"), "" otherwise
  // The context the model was trained for (GGUF context_length, a config's
  // max_position_embeddings), when the source says.
  std::optional<int64_t> trained_context;

  bool window_layer(int64_t il) const { return !window_layers.empty() && window_layers[static_cast<size_t>(il)]; }
  int64_t n_window_layers() const;
  KvShape kv() const { return {n_layer, n_kv_head, head_dim}; }
};

// The shape of a GGUF from <arch>.block_count, .attention.head_count,
// .attention.head_count_kv (default: head_count), .attention.key_length
// (default: embedding_length / head_count, which must divide exactly;
// .attention.value_length, when present, must equal it) and the sliding
// window (.attention.sliding_window over the layers that
// .attention.sliding_window_pattern flags, as llama.cpp writes it: one flag
// per layer or a period; else the architecture's own pattern). Needs no
// vocabulary or tensors; counts the parameters and weight bytes when the file
// has tensors. The one reader of these keys: the run path and the cache
// planner both call it, so they cannot disagree on a shape.
ModelShape shape_from_gguf(const GgufFile& f);

}  // namespace tally
