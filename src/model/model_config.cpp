#include "model/model_config.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "model/hparams.h"

namespace tally {

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  const ModelShape a = shape_from_gguf(f);
  ModelConfig c;
  try {
    c.arch = &architecture_for(a.kind);
  } catch (const Error& e) {
    fail("{}: {}", f.path(), e.what());
  }
  const HParams h(f, a.kind);
  c.n_layer = a.n_layer;
  c.n_head = a.n_head;
  c.n_kv_head = a.n_kv_head;
  c.head_dim = a.head_dim;
  c.n_ctx_train = h.size("context_length");
  c.n_embd = h.size("embedding_length");
  c.n_ff = h.size("feed_forward_length");
  c.rope_dims = h.size("rope.dimension_count", c.head_dim);
  if (c.head_dim % 2 != 0) fail("{}: head_dim {} must be even (RoPE rotates pairs)", f.path(), c.head_dim);
  if (c.rope_dims % 2 != 0 || c.rope_dims > c.head_dim)
    fail("{}: {} = {} must be even and at most head_dim {}", f.path(), h.key("rope.dimension_count"), c.rope_dims,
         c.head_dim);
  c.rope_base = h.positive_float("rope.freq_base", 10000.0);
  // Required, as llama.cpp requires it: a default would run a model that
  // may have been trained with another epsilon.
  c.rms_eps = h.positive_float("attention.layer_norm_rms_epsilon");
  c.window = a.window;
  c.window_layers = a.window_layers;
  if (c.window > 0) c.rope_base_swa = h.positive_float("rope.freq_base_swa", c.arch->rope_base_swa);
  // An explicit vocab_size is checked as given (0 is not "absent").
  uint64_t vocab = h.has("vocab_size") ? static_cast<uint64_t>(h.size("vocab_size")) : 0;
  if (vocab == 0 && f.has("tokenizer.ggml.tokens")) vocab = f.get_array("tokenizer.ggml.tokens").size();
  if (vocab == 0) {
    if (const auto* t = f.find_tensor("token_embd.weight"); t && t->dims.size() == 2) vocab = t->dim(1);
  }
  c.n_vocab = h.check("vocab_size", vocab);
  return c;
}

}  // namespace tally
