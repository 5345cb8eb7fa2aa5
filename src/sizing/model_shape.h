#pragma once
// The shape of a model's attention (what its KV cache holds) and, when the
// source tells, what its weights weigh: read from a GGUF file, a Hugging Face
// config.json (hf_config.h), or given directly. Invariants after every reader:
// layers, heads, kv heads and head_dim positive; heads a multiple of kv heads.
#include <cstdint>
#include <optional>
#include <string>

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
  int64_t window = 0;           // sliding window of n_window_layers layers (0: none)
  int64_t n_window_layers = 0;
  // Known from a GGUF with tensors (their element count and bytes), or from a
  // config (computed parameters x bytes of its dtype); absent otherwise.
  std::optional<uint64_t> parameters;
  std::optional<uint64_t> weights_bytes;
  std::string weights_dtype;  // the config's dtype name ("bfloat16"), "" otherwise
  // The context the model was trained for (GGUF context_length, a config's
  // max_position_embeddings), when the source says.
  std::optional<int64_t> trained_context;

  KvShape kv() const { return {n_layer, n_kv_head, head_dim}; }
};

// Checks positivity and divisibility; errors name the flag.
ModelShape shape_from_flags(int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim);
// The attention layout of a GGUF, by the model's own reader
// (read_attention_layout): files without a vocabulary or tensors are accepted.
// Also the parameter count and weight bytes when the file has tensors.
ModelShape shape_from_gguf(const std::string& path);
ModelShape shape_from_gguf(const GgufFile& f);
// Where to read a shape from: exactly one of a GGUF path, a config path, or
// the four explicit sizes (all of them).
struct ShapeSource {
  std::string gguf;
  std::string config;
  std::optional<int64_t> layers, heads, kv_heads, head_dim;
  bool want_weights = true;  // for a config: count its parameters
  // For a config: its weights stored in this format instead of its torch_dtype
  // (a GGUF made from it), bits per weight (sizing/kv_plan.h: weight_format).
  std::optional<double> weights_bits;
};
// Checks that exactly one source is given, then reads it.
ModelShape read_model_shape(const ShapeSource& src);

}  // namespace tally
