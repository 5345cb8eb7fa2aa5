#include "sizing/hf_config.h"

#include <algorithm>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/printable.h"
#include "io/hf_config_file.h"
#include "io/text_file.h"

namespace tally {
namespace {

uint64_t mul(uint64_t a, uint64_t b) {
  auto r = checked_mul(a, b);
  if (!r) fail("parameter count overflows 64 bits");
  return *r;
}

uint64_t add(uint64_t a, uint64_t b) {
  auto r = checked_add(a, b);
  if (!r) fail("parameter count overflows 64 bits");
  return *r;
}

// Sliding-window layers hold only the window: those the config lists
// (HfConfig::window_layers). A sliding_window without a list (or with
// use_sliding_window false, as Qwen2/3 configs carry) leaves every layer
// planned as global.
void read_sliding_window(const HfConfig& c, ModelShape& s) {
  const auto window = c.get_int("sliding_window");
  if (!window || !c.get_bool_either("use_sliding_window").value_or(true)) return;
  auto layers = c.window_layers(s.n_layer);
  if (!layers || std::count(layers->begin(), layers->end(), true) == 0) return;
  s.window = *window;
  s.window_layers = std::move(*layers);
}

}  // namespace

uint64_t dense_decoder_parameters(const ModelShape& d, const DenseDecoderKind& kind) {
  for (int64_t v : {d.n_vocab, d.n_embd, d.n_ff, d.n_layer, d.n_head, d.n_kv_head, d.head_dim})
    if (v <= 0 || v > kMaxModelDim)
      fail("decoder sizes must be positive (vocab {}, hidden {}, ffn {}, layers {}, heads {}, kv heads {}, head_dim {})",
           d.n_vocab, d.n_embd, d.n_ff, d.n_layer, d.n_head, d.n_kv_head, d.head_dim);
  const uint64_t e = d.n_embd, q = mul(d.n_head, d.head_dim), kv = mul(d.n_kv_head, d.head_dim);
  const uint64_t embeddings = mul(d.n_vocab, e);
  uint64_t layer = add(mul(e, q), mul(q, e));   // wq (embd -> q), wo (q -> embd)
  layer = add(layer, mul(2, mul(e, kv)));        // wk, wv (embd -> kv)
  layer = add(layer, mul(3, mul(e, d.n_ff)));    // gate, up, down
  layer = add(layer, mul(2, e));                 // attention and ffn norms
  if (kind.qk_norm) layer = add(layer, mul(2, d.head_dim));
  if (kind.qkv_bias) layer = add(layer, add(q, mul(2, kv)));
  uint64_t total = add(embeddings, add(mul(d.n_layer, layer), e));  // + final norm
  if (!kind.tied_embeddings) total = add(total, embeddings);           // separate output matrix
  return total;
}

uint64_t hf_dtype_bytes(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  if (name == "bfloat16" || name == "float16" || name == "half" || name == "bf16" || name == "fp16" ||
      name == "f16")
    return 2;
  if (name == "float32" || name == "float" || name == "fp32" || name == "f32") return 4;
  if (name == "float64" || name == "double") return 8;
  if (name == "int8" || name == "uint8" || name == "float8_e4m3fn" || name == "float8_e5m2") return 1;
  return 0;
}

ModelShape shape_from_hf_config_text(const std::string& text, const std::string& source, bool want_weights,
                                     std::optional<double> weights_bits) {
  const HfConfig c(text, source);
  ModelShape s;
  s.source = source;
  s.text_config = c.nested();
  s.kind = c.get_string_either("model_type").value_or("");
  s.n_layer = c.require_int("num_hidden_layers", "the cache size");
  s.n_head = c.require_int("num_attention_heads", "the cache size");
  s.n_kv_head = c.get_int("num_key_value_heads").value_or(s.n_head);
  if (s.n_head % s.n_kv_head != 0)
    fail("{}: '{}num_attention_heads' {} is not divisible by '{}num_key_value_heads' {}", source, c.prefix(),
         s.n_head, c.prefix(), s.n_kv_head);
  const auto hidden = c.get_int("hidden_size");
  if (auto hd = c.get_int("head_dim")) {
    s.head_dim = *hd;
  } else {
    if (!hidden) fail("{}: missing '{}head_dim' and '{}hidden_size' (one is needed for the cache size)", source,
                      c.prefix(), c.prefix());
    if (*hidden % s.n_head != 0)
      fail("{}: '{}hidden_size' {} is not divisible by {} heads and no head_dim is given", source, c.prefix(),
           *hidden, s.n_head);
    s.head_dim = *hidden / s.n_head;
  }
  read_sliding_window(c, s);
  if (const auto ctx = c.get_int("max_position_embeddings"); ctx && *ctx > 0) s.trained_context = *ctx;
  if (!want_weights) return s;

  for (const char* moe : {"num_experts", "num_local_experts", "n_routed_experts"})
    if (c.get_int(moe))
      fail("{}: '{}{}' makes this a mixture-of-experts model, whose weights are not counted here; give "
           "--weights-bytes",
           source, c.prefix(), moe);
  s.n_embd = c.require_int("hidden_size", "the parameter count; or give --weights-bytes");
  s.n_ff = c.require_int("intermediate_size", "the parameter count; or give --weights-bytes");
  s.n_vocab = c.require_int("vocab_size", "the parameter count; or give --weights-bytes");
  DenseDecoderKind kind;
  // LlamaConfig, Qwen2Config and Qwen3Config all default to untied embeddings.
  kind.tied_embeddings = c.get_bool_either("tie_word_embeddings").value_or(false);
  kind.qk_norm = s.kind.starts_with("qwen3");
  kind.qkv_bias = c.get_bool_either("attention_bias").value_or(false) || s.kind.starts_with("qwen2");
  s.parameters = dense_decoder_parameters(s, kind);
  if (weights_bits) {
    s.weights_bytes = static_cast<uint64_t>(static_cast<double>(*s.parameters) * *weights_bits / 8 + 0.5);
    return s;
  }

  const auto dtype = c.weights_dtype();
  if (!dtype) fail("{}: missing 'torch_dtype' or 'dtype' (needed for the weight bytes; or give --weights-bytes or "
         "--weights-dtype)",
         source);
  const uint64_t bytes = hf_dtype_bytes(*dtype);
  if (bytes == 0) fail("{}: unknown weight dtype '{}' (give --weights-bytes or --weights-dtype)", source, excerpt(*dtype, 40));
  s.weights_dtype = *dtype;
  s.weights_bytes = mul(*s.parameters, bytes);
  return s;
}

ModelShape shape_from_hf_config(const std::string& path, bool want_weights, std::optional<double> weights_bits) {
  // Real configs are a few KiB; the limit only stops endless input.
  return shape_from_hf_config_text(read_text_file(path, "config file", kMaxConfigBytes), path, want_weights,
                                   weights_bits);
}

}  // namespace tally
