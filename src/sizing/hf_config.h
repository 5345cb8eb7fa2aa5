#pragma once
// A Hugging Face config.json as a cache planner reads it: the attention shape
// of the model (of its "text_config" when present) and, for dense llama-style
// decoders, the parameter count and weight bytes from its sizes and dtype.
// Untrusted input: every error names the file and the field.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "sizing/model_shape.h"

namespace tally {

// How a dense llama-style decoder's layers differ beyond its sizes.
struct DenseDecoderKind {
  bool tied_embeddings = true;  // no output matrix of its own
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3): 2 x head_dim per layer
  bool qkv_bias = false;        // biases on the q/k/v projections (Qwen2)
};

// Parameters of a dense llama-style decoder of shape s (its n_vocab, n_embd
// and n_ff set): embeddings, per layer q/k/v/o and gate/up/down projections
// and two norms, a final norm, and an output matrix unless tied. Throws on a
// non-positive size or overflow.
uint64_t dense_decoder_parameters(const ModelShape& s, const DenseDecoderKind& kind);

// Reads a config.json (its "text_config" when present). With `want_weights`
// it also computes the parameter count and weight bytes, and then requires
// hidden_size, intermediate_size, vocab_size and, unless `weights_bits` says
// how many bits each weight takes, a torch_dtype/dtype.
ModelShape shape_from_hf_config(const std::string& path, bool want_weights = true,
                                std::optional<double> weights_bits = std::nullopt);
// The same from the text of a config; `source` names it in errors.
ModelShape shape_from_hf_config_text(const std::string& text, const std::string& source, bool want_weights = true,
                                     std::optional<double> weights_bits = std::nullopt);

// Bytes per number of a config's dtype name ("bfloat16" -> 2); 0 when unknown.
uint64_t hf_dtype_bytes(std::string_view name);

}  // namespace tally
