#include "model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/byte_size.h"
#include "core/error.h"
#include "model/hf_folder.h"
#include "tokenizer/chat_template.h"
#include "io/session_file.h"
#include "kernels/dequantize.h"
#include "kernels/matmul.h"

namespace tally {

std::unique_ptr<Model> Model::load(const std::string& path) {
  return std::make_unique<Model>(open_model_file(path));
}

const GgufTensorInfo& Model::bind(const std::string& name) {
  const GgufTensorInfo* t = file_->find_tensor(name);
  if (!t) fail("{}: missing tensor '{}'", file_->path(), name);
  bound_.insert(t);
  return *t;
}

WeightMatrix Model::matrix(const std::string& name, int64_t rows, int64_t cols) {
  const GgufTensorInfo* t = &bind(name);
  if (t->dims.size() != 2 || static_cast<int64_t>(t->dims[0]) != cols || static_cast<int64_t>(t->dims[1]) != rows)
    fail("{}: tensor '{}' has shape {}, expected {{{}, {}}}", file_->path(), name, t->shape_string(), cols, rows);
  if (cols % 32 != 0) fail("{}: tensor '{}' rows of {} values are not a multiple of 32", file_->path(), name, cols);
  if (!matmul_supported(t->type))
    fail("{}: tensor '{}' has type {} (id {}), which tally cannot multiply", file_->path(), name,
         dtype_name(t->type), static_cast<uint32_t>(t->type));
  // Before anything reads it: a NaN or infinite weight (or block scale) would
  // turn every logit it reaches into NaN, and the text into nonsense.
  if (const int64_t bad = first_non_finite(t->type, t->data, static_cast<uint64_t>(rows * cols)); bad >= 0)
    fail("{}: tensor '{}' holds a value that is not finite (NaN or infinite) in row {}, column {}{}", file_->path(),
         name, bad / cols, bad % cols, traits(t->type).block_size > 1 ? " (a block scale)" : "");
  LineBytes storage;
  const WeightMatrix w = make_weight_matrix(t->type, rows, cols, t->data, storage);
  if (storage) {  // repacked: the mapped source pages are no longer needed
    repacked_.push_back(std::move(storage));
    file_->release(*t);
  }
  return w;
}

std::vector<float> Model::vector(const std::string& name, int64_t n) {
  const GgufTensorInfo* t = &bind(name);
  if (t->dims.size() != 1 || static_cast<int64_t>(t->dims[0]) != n)
    fail("{}: tensor '{}' has shape {}, expected {{{}}}", file_->path(), name, t->shape_string(), n);
  std::vector<float> v(n);
  try {
    dequantize_row(t->type, t->data, v.data(), n);
  } catch (const Error& e) {
    fail("{}: tensor '{}': {}", file_->path(), name, e.what());
  }
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(v[static_cast<size_t>(i)]))
      fail("{}: tensor '{}' holds a value that is not finite (NaN or infinite) at index {}", file_->path(), name, i);
  return v;
}

namespace {

// The blocks the file has tensors for must be exactly [0, n_layer): a larger
// block count would size per-layer tables from a number the file cannot back
// (2^31 layers in a 100 MB file), a smaller one would ignore weights silently.
void check_block_count(const GgufFile& f, const ModelConfig& c) {
  const std::string key = std::string(c.arch->name) + ".block_count";
  int64_t last = -1;
  std::string last_name;
  for (const GgufTensorInfo& t : f.tensors()) {
    if (!t.name.starts_with("blk.")) continue;
    const std::string_view rest = std::string_view(t.name).substr(4);
    const auto index = parse_whole(rest.substr(0, rest.find('.')));
    if (!index || *index >= static_cast<uint64_t>(kMaxModelDim))
      fail("{}: tensor '{}' has no block number below {}", f.path(), t.name, kMaxModelDim);
    if (static_cast<int64_t>(*index) > last) {
      last = static_cast<int64_t>(*index);
      last_name = t.name;
    }
  }
  if (last + 1 < c.n_layer)
    fail("{}: {} = {}, but the file has tensors for {} blocks{}", f.path(), key, c.n_layer, last + 1,
         last < 0 ? " (no blk.N.* tensors)" : fmt::format(" (blk.0 to blk.{})", last));
  if (last + 1 > c.n_layer)
    fail("{}: {} = {}, but the file has tensors of block {} ('{}'): they would be ignored", f.path(), key,
         c.n_layer, last, last_name);
}

}  // namespace

Model::Model(std::unique_ptr<GgufFile> file) : file_(std::move(file)), cfg_(ModelConfig::from_gguf(*file_)) {
  const auto& c = cfg_;
  check_block_count(*file_, c);
  {  // before any mapped page is released
    std::string desc = fmt::format("{} {} {} {} {} {} {} {} {} {} {:a} {:a}\n", c.arch->name, c.n_vocab, c.n_ctx_train,
                                   c.n_embd, c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.n_ff, c.rope_dims,
                                   c.rope_base, c.rms_eps);
    fingerprint_ = fnv1a64(reinterpret_cast<const uint8_t*>(desc.data()), desc.size());
    for (const auto& t : file_->tensors()) {
      desc = fmt::format("{} {} {} {}\n", t.name, static_cast<uint32_t>(t.type), t.shape_string(), t.n_bytes);
      fingerprint_ = fnv1a64(reinterpret_cast<const uint8_t*>(desc.data()), desc.size(), fingerprint_);
      fingerprint_ = fnv1a64(t.data, std::min<uint64_t>(t.n_bytes, 64), fingerprint_);
    }
  }
  token_embd_ = matrix("token_embd.weight", c.n_vocab, c.n_embd);
  if (file_->find_tensor("output.weight")) {
    output_ = matrix("output.weight", c.n_vocab, c.n_embd);
  } else {
    output_ = token_embd_;
    tied_ = true;
  }
  output_norm_ = vector("output_norm.weight", c.n_embd);
  layers_.resize(c.n_layer);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    auto n = [i](const char* what) { return fmt::format("blk.{}.{}.weight", i, what); };
    LayerWeights& L = layers_[i];
    L.attn_norm = vector(n("attn_norm"), c.n_embd);
    L.wq = matrix(n("attn_q"), c.q_dim(), c.n_embd);
    L.wk = matrix(n("attn_k"), c.kv_dim(), c.n_embd);
    L.wv = matrix(n("attn_v"), c.kv_dim(), c.n_embd);
    L.wo = matrix(n("attn_output"), c.n_embd, c.q_dim());
    L.ffn_norm = vector(n("ffn_norm"), c.n_embd);
    L.ffn_gate = matrix(n("ffn_gate"), c.n_ff, c.n_embd);
    L.ffn_up = matrix(n("ffn_up"), c.n_ff, c.n_embd);
    L.ffn_down = matrix(n("ffn_down"), c.n_embd, c.n_ff);
    if (c.arch->qk_norm) {
      L.q_norm = vector(n("attn_q_norm"), c.head_dim);
      L.k_norm = vector(n("attn_k_norm"), c.head_dim);
    }
    if (c.arch->qkv_bias) {
      auto b = [i](const char* what) { return fmt::format("blk.{}.{}.bias", i, what); };
      L.q_bias = vector(b("attn_q"), c.q_dim());
      L.k_bias = vector(b("attn_k"), c.kv_dim());
      L.v_bias = vector(b("attn_v"), c.kv_dim());
    }
    if (c.arch->post_norms) {
      L.post_attn_norm = vector(n("post_attention_norm"), c.n_embd);
      L.post_ffw_norm = vector(n("post_ffw_norm"), c.n_embd);
    }
  }
  // A tensor the forward pass does not read (a bias the architecture has no
  // place for, another model's weights) would be ignored: refused instead.
  for (const GgufTensorInfo& t : file_->tensors())
    if (!bound_.count(&t))
      fail("{}: tensor '{}' is not one a {} model uses; it would be ignored", file_->path(), t.name, c.arch->name);
  bound_.clear();
}

uint64_t Model::weight_bytes() const { return file_->total_tensor_bytes(); }


void Model::embed(int32_t token, float* out) const {
  if (token < 0 || token >= cfg_.n_vocab) fail("token id {} is outside the vocabulary [0, {})", token, cfg_.n_vocab);
  dequantize_matrix_row(token_embd_, token, out);
}

ChatTemplate chat_template_of(const Model& m) {
  const Architecture& a = *m.config().arch;
  return ChatTemplate::from_gguf(m.file(), a.chat_template, fmt::format("the {} architecture's chat template", a.name));
}

}  // namespace tally
