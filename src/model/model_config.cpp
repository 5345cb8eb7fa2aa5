#include "model/model_config.h"

#include <string>

#include "core/error.h"

namespace tally {

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  const std::string arch = f.get_string("general.architecture");
  c.arch = &architecture_for(arch);
  auto key = [&](const char* k) { return arch + "." + k; };
  auto positive = [&](const std::string& k, uint64_t v) -> int64_t {
    if (v == 0 || v > (1ull << 31)) fail("{}: metadata '{}' = {} is out of range", f.path(), k, v);
    return static_cast<int64_t>(v);
  };
  c.n_layer = positive(key("block_count"), f.get_u64(key("block_count")));
  c.n_ctx_train = positive(key("context_length"), f.get_u64(key("context_length")));
  c.n_embd = positive(key("embedding_length"), f.get_u64(key("embedding_length")));
  c.n_ff = positive(key("feed_forward_length"), f.get_u64(key("feed_forward_length")));
  c.n_head = positive(key("attention.head_count"), f.get_u64(key("attention.head_count")));
  c.n_head_kv = positive(key("attention.head_count_kv"), f.get_u64(key("attention.head_count_kv"), c.n_head));
  if (c.n_head % c.n_head_kv != 0)
    fail("{}: {} = {} query heads are not divisible into {} = {} kv heads", f.path(), key("attention.head_count"),
         c.n_head, key("attention.head_count_kv"), c.n_head_kv);
  c.head_dim = positive(key("attention.key_length"), f.get_u64(key("attention.key_length"), c.n_embd / c.n_head));
  c.rope_dims = positive(key("rope.dimension_count"), f.get_u64(key("rope.dimension_count"), c.head_dim));
  if (c.rope_dims % 2 != 0 || c.rope_dims > c.head_dim)
    fail("{}: rope.dimension_count {} must be even and at most head_dim {}", f.path(), c.rope_dims, c.head_dim);
  c.rope_base = static_cast<float>(f.get_f64(key("rope.freq_base"), 10000.0));
  c.rms_eps = static_cast<float>(f.get_f64(key("attention.layer_norm_rms_epsilon"), 1e-5));
  if (!(c.rope_base > 0) || !(c.rms_eps > 0)) fail("{}: rope.freq_base and rms epsilon must be positive", f.path());
  uint64_t vocab = f.get_u64(key("vocab_size"), 0);
  if (vocab == 0 && f.has("tokenizer.ggml.tokens")) vocab = f.get_array("tokenizer.ggml.tokens").size();
  if (vocab == 0) {
    if (const auto* t = f.find_tensor("token_embd.weight")) vocab = t->dim(1);
  }
  c.n_vocab = positive(key("vocab_size"), vocab);
  if (c.head_dim % 2 != 0) fail("{}: head_dim {} must be even", f.path(), c.head_dim);
  return c;
}

}  // namespace tally
