#include "model/model_config.h"

#include <cfloat>
#include <cmath>
#include <string>

#include "core/error.h"

namespace tally {
namespace {

constexpr uint64_t kMaxDim = kMaxModelDim;

// Reads "<arch>.<key>" as a positive size, naming the file and key when it is not.
class HParams {
 public:
  HParams(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string key(const char* k) const { return arch_ + "." + k; }
  bool has(const char* k) const { return f_.has(key(k)); }
  int64_t size(const char* k) const { return check(k, f_.get_u64(key(k))); }
  int64_t size(const char* k, int64_t fallback) const {
    return check(k, f_.get_u64(key(k), static_cast<uint64_t>(fallback)));
  }
  // A positive finite number that a float can hold (the forward pass computes in float).
  float positive_float(const char* k, double fallback) const {
    return has(k) ? positive_float(k) : static_cast<float>(fallback);
  }
  float positive_float(const char* k) const {
    if (!has(k)) fail("{}: missing metadata '{}'", f_.path(), key(k));
    const double v = f_.get_f64(key(k), 0);
    if (!std::isfinite(v) || v <= 0 || v > FLT_MAX || static_cast<float>(v) == 0.0f)
      fail("{}: metadata '{}' = {} must be a positive finite number", f_.path(), key(k), v);
    return static_cast<float>(v);
  }
  int64_t check(const char* k, uint64_t v) const {
    if (v == 0 || v > kMaxDim) fail("{}: metadata '{}' = {} is out of range (1 to {})", f_.path(), key(k), v, kMaxDim);
    return static_cast<int64_t>(v);
  }

 private:
  const GgufFile& f_;
  std::string arch_;
};

}  // namespace

AttentionLayout read_attention_layout(const GgufFile& f) {
  AttentionLayout a;
  a.arch = f.get_string("general.architecture");
  const HParams h(f, a.arch);
  a.n_layer = h.size("block_count");
  a.n_head = h.size("attention.head_count");
  a.n_kv_head = h.size("attention.head_count_kv", a.n_head);
  if (a.n_head % a.n_kv_head != 0)
    fail("{}: {} = {} query heads are not divisible into {} = {} kv heads", f.path(), h.key("attention.head_count"),
         a.n_head, h.key("attention.head_count_kv"), a.n_kv_head);
  if (h.has("attention.key_length")) {
    a.head_dim = h.size("attention.key_length");
  } else {
    const int64_t embd = h.size("embedding_length");
    if (embd % a.n_head != 0)
      fail("{}: cannot derive the head size: {} = {} is not a multiple of {} = {}", f.path(),
           h.key("embedding_length"), embd, h.key("attention.head_count"), a.n_head);
    a.head_dim = embd / a.n_head;
  }
  if (h.has("attention.value_length") && h.size("attention.value_length") != a.head_dim)
    fail("{}: {} = {} differs from the key length {}; caches with other value sizes are not supported", f.path(),
         h.key("attention.value_length"), h.size("attention.value_length"), a.head_dim);
  if (h.has("attention.sliding_window")) {
    a.window = h.size("attention.sliding_window");
    for (int64_t il = 0; il < a.n_layer; ++il) a.n_window_layers += is_window_layer(a.arch, il) ? 1 : 0;
    if (a.n_window_layers == 0) a.window = 0;  // no known pattern: every layer planned as global
  }
  return a;
}

bool is_window_layer(std::string_view arch, int64_t il) {
  // gemma3: HF's sliding_window_pattern 6 (llama.cpp's swa pattern): five
  // sliding layers, then a global one (layers 5, 11, 17 of 18).
  if (arch == "gemma3") return il % 6 < 5;
  return false;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  const AttentionLayout a = read_attention_layout(f);
  ModelConfig c;
  try {
    c.arch = &architecture_for(a.arch);
  } catch (const Error& e) {
    fail("{}: {}", f.path(), e.what());
  }
  const HParams h(f, a.arch);
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
