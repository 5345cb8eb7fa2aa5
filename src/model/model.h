#pragma once
// A loaded decoder: the mapped GGUF file, its configuration and views of its
// weights. Matrices stay in the file's quantized format (never expanded):
// inside the mapping, or, for the formats the SIMD kernels read in the split
// layout, regrouped into a copy of the same size whose source pages are then
// released. Only the small norm vectors are copied out as f32.
// Load refuses a file with a tensor the architecture does not use and a
// weight that is not finite (every float, every block scale: a pass over
// the scales, not a dequantization), naming the tensor.
// Immutable after load; safe to share between threads.
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "io/gguf.h"
#include "kernels/matmul.h"
#include "kv/kv_shape.h"
#include "model/model_config.h"

namespace tally {

class ChatTemplate;

struct LayerWeights {
  std::vector<float> attn_norm;          // (n_embd)
  WeightMatrix wq, wk, wv, wo;           // (q_dim, n_embd) (kv_dim, n_embd) x2 (n_embd, q_dim)
  std::vector<float> ffn_norm;           // (n_embd)
  WeightMatrix ffn_gate, ffn_up;         // (n_ff, n_embd)
  WeightMatrix ffn_down;                 // (n_embd, n_ff)
  // Architectures with qk_norm: (head_dim) each; with post_norms: (n_embd) each. Empty otherwise.
  std::vector<float> q_norm, k_norm;
  std::vector<float> post_attn_norm, post_ffw_norm;
  std::vector<float> q_bias, k_bias, v_bias;  // with qkv_bias: (q_dim) (kv_dim) (kv_dim)
};

class Model {
 public:
  // Throws tally::Error naming the file, the tensor and expected vs actual shapes.
  static std::unique_ptr<Model> load(const std::string& path);
  explicit Model(std::unique_ptr<GgufFile> file);

  const GgufFile& file() const { return *file_; }
  const ModelConfig& config() const { return cfg_; }
  const WeightMatrix& token_embd() const { return token_embd_; }  // (n_vocab, n_embd)
  const WeightMatrix& output() const { return output_; }          // (n_vocab, n_embd); may be token_embd
  bool tied_output() const { return tied_; }
  const std::vector<float>& output_norm() const { return output_norm_; }
  const LayerWeights& layer(int64_t i) const { return layers_[i]; }
  uint64_t weight_bytes() const;  // bytes of every tensor in the file
  // What one position of its KV cache holds.
  KvShape kv_shape() const { return {cfg_.n_layer, cfg_.n_kv_head, cfg_.head_dim}; }
  // A hash of the architecture, the hyper-parameters, the tensor table (names,
  // types, shapes, sizes) and the first bytes of every tensor: a saved
  // session's K/V fits only the model whose fingerprint it carries.
  uint64_t fingerprint() const { return fingerprint_; }

  // Row `token` of the embedding table as f32 (n_embd values).
  void embed(int32_t token, float* out) const;

 private:
  // The tensor `name`, counted as used (every tensor of the file must be).
  const GgufTensorInfo& bind(const std::string& name);
  WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols);
  std::vector<float> vector(const std::string& name, int64_t n);

  std::unique_ptr<GgufFile> file_;
  ModelConfig cfg_;
  WeightMatrix token_embd_, output_;
  bool tied_ = false;
  std::vector<float> output_norm_;
  std::vector<LayerWeights> layers_;
  std::vector<LineBytes> repacked_;  // storage of split-layout matrices
  std::unordered_set<const GgufTensorInfo*> bound_;  // while loading: the tensors bound so far
  uint64_t fingerprint_ = 0;
};

// The model's chat template: its file's, else its architecture's
// (Architecture::chat_template); throws when there is neither.
ChatTemplate chat_template_of(const Model& m);

}  // namespace tally
