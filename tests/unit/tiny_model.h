#pragma once
// A tiny synthetic decoder for fast forward-pass tests: an in-memory GGUF with
// deterministic pseudo-random weights (F32 or Q8_0 matrices) and every
// metadata key the loader reads. TinySpec also describes broken variants
// (a dropped tensor or key, one tensor's dims or type changed or bytes
// overwritten, an extra tensor, another architecture name) for the loader's
// bad-input tests.
// Invariant of TinyModel: `bytes` outlives `model`, which points into it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/half.h"
#include "gguf_builder.h"
#include "io/gguf.h"
#include "model/model.h"

namespace tally::test {

// A tensor as written: its GGUF dims, type and data bytes.
struct TinyTensor {
  std::vector<uint64_t> dims;
  uint32_t type = 0;
  std::vector<uint8_t> data;
};

struct TinySpec {
  std::string arch = "llama";
  int64_t n_vocab = 50;
  int64_t n_ctx_train = 128;
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_kv_head = 2;  // GQA by default
  int64_t head_dim = 16;
  int64_t n_ff = 96;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied = false;               // true: no output.weight (logits use token_embd)
  DType matrix_type = DType::F32;  // F32 or Q8_0 for the 2-D tensors
  uint64_t seed = 1;
  float scale = 0.1f;              // matrices: uniform in [-scale, scale)

  std::set<std::string> drop_tensors;                     // not written at all
  std::set<std::string> drop_keys;                        // metadata keys not written (full names)
  std::map<std::string, Meta> meta_of;                    // a key written with this value instead (or added)
  std::map<std::string, std::vector<uint64_t>> dims_of;   // a tensor written with other dims
  std::map<std::string, uint32_t> type_of;                // a tensor written as this raw type id, zero data
  std::map<std::string, std::pair<uint64_t, std::vector<uint8_t>>> patch_of;  // bytes written over a tensor's data at an offset
  std::map<std::string, TinyTensor> extra_tensors;        // written after the others

  std::string key(const char* k) const { return arch + "." + k; }
};

namespace tiny_detail {

// splitmix64: the same seed gives the same weights on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * 0x1p-24f * 2.0f - 1.0f; }  // [-1, 1)

 private:
  uint64_t s_;
};

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace tiny_detail

// Q8_0, 32 values per block: fp16 d = amax / 127, then 32 int8 q = round(x / d).
inline std::vector<uint8_t> quantize_q8_0(const std::vector<float>& x) {
  std::vector<uint8_t> out;
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    const float d = amax / 127.0f;
    const uint16_t dh = f32_to_f16(d);
    out.push_back(static_cast<uint8_t>(dh & 0xff));
    out.push_back(static_cast<uint8_t>(dh >> 8));
    for (int i = 0; i < 32; ++i) {
      const long q = d == 0 ? 0 : std::lround(x[b * 32 + i] / d);
      out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::clamp(q, -127L, 127L))));
    }
  }
  return out;
}

// The values a tensor holds, decoded by the test itself (F32 and Q8_0 only).
inline std::vector<double> dequantize_tiny(const TinyTensor& t) {
  uint64_t n = 1;
  for (uint64_t d : t.dims) n *= d;
  std::vector<double> v(n);
  if (t.type == static_cast<uint32_t>(DType::F32)) {
    for (uint64_t i = 0; i < n; ++i) {
      float f;
      std::memcpy(&f, t.data.data() + 4 * i, 4);
      v[i] = f;
    }
  } else if (t.type == static_cast<uint32_t>(DType::Q8_0)) {
    for (uint64_t b = 0; b < n / 32; ++b) {
      const uint8_t* blk = t.data.data() + 34 * b;
      const double d = f16_to_f32(static_cast<uint16_t>(blk[0] | blk[1] << 8));
      for (int i = 0; i < 32; ++i) v[b * 32 + i] = d * static_cast<int8_t>(blk[2 + i]);
    }
  } else {
    throw std::runtime_error("dequantize_tiny: unsupported type " + std::to_string(t.type));
  }
  return v;
}

// Every tensor of the spec, in file order (dropped ones omitted, overrides applied).
inline std::vector<std::pair<std::string, TinyTensor>> tiny_tensors(const TinySpec& s) {
  tiny_detail::Rng rng(s.seed);
  std::vector<std::pair<std::string, TinyTensor>> out;
  const uint64_t E = s.n_embd, Q = s.n_head * s.head_dim, KV = s.n_kv_head * s.head_dim, F = s.n_ff,
                 V = s.n_vocab;
  auto add = [&](const std::string& name, std::vector<uint64_t> dims, bool is_norm) {
    if (auto it = s.dims_of.find(name); it != s.dims_of.end()) dims = it->second;
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    std::vector<float> v(n);
    // Norm weights near 1 keep the residual stream well scaled; matrices are small.
    for (auto& x : v) x = is_norm ? 1.0f + 0.1f * rng.uniform() : s.scale * rng.uniform();
    if (s.drop_tensors.count(name)) return;  // drawn anyway: dropping one keeps the others' values
    TinyTensor t;
    t.dims = dims;
    if (auto it = s.type_of.find(name); it != s.type_of.end()) {
      t.type = it->second;
      const auto tr = dtype_traits(it->second);
      t.data.assign(tr ? n / tr->block_size * tr->type_size : n, 0);
    } else if (is_norm || s.matrix_type == DType::F32) {
      t.type = static_cast<uint32_t>(DType::F32);
      t.data = tiny_detail::f32_bytes(v);
    } else {
      t.type = static_cast<uint32_t>(s.matrix_type);
      t.data = quantize_q8_0(v);
    }
    if (auto it = s.patch_of.find(name); it != s.patch_of.end())
      std::copy(it->second.second.begin(), it->second.second.end(), t.data.begin() + static_cast<ptrdiff_t>(it->second.first));
    out.emplace_back(name, std::move(t));
  };
  add("token_embd.weight", {E, V}, false);
  add("output_norm.weight", {E}, true);
  if (!s.tied) add("output.weight", {E, V}, false);
  for (int64_t l = 0; l < s.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", {E}, true);
    add(b + "attn_q.weight", {E, Q}, false);
    add(b + "attn_k.weight", {E, KV}, false);
    add(b + "attn_v.weight", {E, KV}, false);
    add(b + "attn_output.weight", {Q, E}, false);
    add(b + "ffn_norm.weight", {E}, true);
    add(b + "ffn_gate.weight", {E, F}, false);
    add(b + "ffn_up.weight", {E, F}, false);
    add(b + "ffn_down.weight", {F, E}, false);
  }
  for (const auto& [name, t] : s.extra_tensors) out.emplace_back(name, t);
  return out;
}

inline std::vector<uint8_t> build_tiny_gguf(const TinySpec& s) {
  GgufBuilder g;
  std::set<std::string> written;
  auto kv = [&](const std::string& key, Meta m) {
    written.insert(key);
    if (s.drop_keys.count(key)) return;
    const auto it = s.meta_of.find(key);
    g.kv(key, it != s.meta_of.end() ? it->second : std::move(m));
  };
  auto u32 = [](int64_t v) { return m_u32(static_cast<uint32_t>(v)); };
  kv("general.architecture", m_str(s.arch));
  kv("general.name", m_str("tiny"));
  kv(s.key("vocab_size"), u32(s.n_vocab));
  kv(s.key("context_length"), u32(s.n_ctx_train));
  kv(s.key("embedding_length"), u32(s.n_embd));
  kv(s.key("block_count"), u32(s.n_layer));
  kv(s.key("feed_forward_length"), u32(s.n_ff));
  kv(s.key("attention.head_count"), u32(s.n_head));
  kv(s.key("attention.head_count_kv"), u32(s.n_kv_head));
  kv(s.key("attention.key_length"), u32(s.head_dim));
  kv(s.key("attention.value_length"), u32(s.head_dim));
  kv(s.key("rope.dimension_count"), u32(s.head_dim));
  kv(s.key("rope.freq_base"), m_f32(s.rope_base));
  kv(s.key("attention.layer_norm_rms_epsilon"), m_f32(s.rms_eps));
  for (const auto& [key, m] : s.meta_of)
    if (!written.count(key)) g.kv(key, m);
  for (auto& [name, t] : tiny_tensors(s)) g.tensor(name, t.dims, t.type, t.data);
  return g.build();
}

struct TinyModel {
  TinySpec spec;
  std::vector<uint8_t> bytes;  // declared before `model`: destroyed after it
  std::unique_ptr<Model> model;
};

// Builds and loads; throws tally::Error when the spec describes a broken model.
inline std::unique_ptr<TinyModel> make_tiny_model(const TinySpec& s = {}) {
  auto t = std::make_unique<TinyModel>();
  t->spec = s;
  t->bytes = build_tiny_gguf(s);
  t->model = std::make_unique<Model>(std::make_unique<GgufFile>(t->bytes.data(), t->bytes.size(), "tiny"));
  return t;
}

}  // namespace tally::test
