#pragma once
// The shape of a model's attention (what its KV cache holds) and, when the
// source tells, what its weights weigh. Read from a GGUF file, a Hugging Face
// config.json, or given directly. Invariants after every reader: layers,
// heads, kv heads and head_dim positive; heads a multiple of kv heads.
#include <cstdint>
#include <optional>
#include <string>

#include "kv/kv_plan.h"

namespace tally {

class GgufFile;

// The sizes that fix the parameter count of a dense llama-style decoder:
// embeddings, per layer q/k/v/o and gate/up/down projections and two norms,
// a final norm, and an output matrix unless tied.
struct DenseDecoderDims {
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_ff = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  bool tied_embeddings = true;
  bool qk_norm = false;   // per-head RMSNorm on q and k (Qwen3): 2 x head_dim per layer
  bool qkv_bias = false;  // biases on the q/k/v projections (Qwen2)
};

// Parameters of such a decoder; throws on a non-positive size or overflow.
uint64_t dense_decoder_parameters(const DenseDecoderDims& d);

struct ModelShape {
  std::string source;  // the file read, or "flags"
  std::string kind;    // architecture / model_type, "" when given by flags
  bool text_config = false;  // the shape came from a vision-language config's text_config
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t head_dim = 0;
  // Known from a GGUF with tensors (their element count and bytes), or from a
  // config (computed parameters x bytes of its dtype); absent otherwise.
  std::optional<uint64_t> parameters;
  std::optional<uint64_t> weights_bytes;
  std::string weights_dtype;  // the config's dtype name ("bfloat16"), "" otherwise

  KvShape kv() const { return {n_layer, n_kv_head, head_dim}; }
};

// Checks positivity and divisibility; errors name the flag.
ModelShape shape_from_flags(int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim);
// Reads <arch>.block_count, .attention.head_count, .attention.head_count_kv
// (default: heads) and .attention.key_length (default: embedding_length / heads)
// directly, so files without a vocabulary or tensors are accepted.
ModelShape shape_from_gguf(const std::string& path);
ModelShape shape_from_gguf(const GgufFile& f);
// Reads a config.json (its "text_config" when present). With `want_weights`
// it also computes the parameter count and weight bytes, and then requires
// hidden_size, intermediate_size, vocab_size and a torch_dtype/dtype.
ModelShape shape_from_hf_config(const std::string& path, bool want_weights = true);
// The same from the text of a config; `source` names it in errors.
ModelShape shape_from_hf_config_text(const std::string& text, const std::string& source, bool want_weights = true);

// Where to read a shape from: exactly one of a GGUF path, a config path, or
// the four explicit sizes (all of them).
struct ShapeSource {
  std::string gguf;
  std::string config;
  std::optional<int64_t> layers, heads, kv_heads, head_dim;
  bool want_weights = true;  // for a config: count its parameters
};
// Checks that exactly one source is given, then reads it.
ModelShape read_model_shape(const ShapeSource& src);

// Bytes per number of a config's dtype name ("bfloat16" -> 2); 0 when unknown.
uint64_t hf_dtype_bytes(std::string_view name);

}  // namespace tally
