#pragma once
// The decoder's forward pass over a chunk of tokens at positions
// [start, start + n): embeddings, pre-norm blocks (RMSNorm, attention with
// RoPE at the true position, RMSNorm, SwiGLU MLP), final norm, logits.
// Each block writes the chunk's K/V into the cache, then every query attends
// to the cached keys it may see. All buffers are allocated in the constructor;
// eval() allocates nothing. One thread drives a Forward (the pool does the
// rest). What the lab observes goes through ForwardHooks (forward_hooks.h).
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/activation_pack.h"
#include "core/thread_pool.h"
#include "kernels/activation_q8.h"
#include "kv/kv_cache.h"
#include "model/forward_hooks.h"
#include "model/model.h"

namespace tally {

enum class LogitsMode { None, Last, All };

class Forward {
 public:
  // max_batch: the largest chunk eval() takes; logits_rows: 1, or max_batch to allow LogitsMode::All.
  Forward(const Model& model, ThreadPool& pool, int64_t max_batch, int64_t n_ctx, bool all_logits);

  // PRECONDITIONS: 1 <= tokens.size() <= max_batch(); kv.length(seq) == start
  // (else the cache refuses: broken continuity).
  void eval(KvCache& kv, KvCache::SeqId seq, std::span<const int32_t> tokens, int64_t start, LogitsMode mode);
  // One pass over tokens at positions [0, n) with no KV cache at all (the
  // text-encoder use): keys and values live in the chunk's own buffers.
  void encode(std::span<const int32_t> tokens, LogitsMode mode);

  // (rows, n_vocab): rows = 1 after Last, n after All.
  const float* logits() const { return logits_.data(); }
  // (n, n_embd): the final-normed hidden states of the last eval.
  const float* hidden() const { return xn_.data(); }
  int64_t max_batch() const { return max_batch_; }
  const Model& model() const { return model_; }

  // An observer for the lab (nullptr: none). Not owned; must outlive its use.
  void set_hooks(ForwardHooks* hooks) { hooks_ = hooks; }

 private:
  void quantize_rows(const float* x, int64_t n, int64_t dim);
  // Returns the (query, key) scores computed, summed over heads.
  uint64_t attention(const KvLayerView& kv, int64_t n, int64_t start);
  void run(std::span<const int32_t> tokens, int64_t start, LogitsMode mode, KvCache* kv, KvCache::SeqId seq);
  KvLayerView chunk_view(int64_t n) const;
  void check_tokens(std::span<const int32_t> tokens, LogitsMode mode) const;

  const Model& model_;
  ThreadPool& pool_;
  int64_t max_batch_, n_ctx_;
  ForwardHooks* hooks_ = nullptr;

  // Activations, row-major per token:
  std::vector<float> x_;       // (n, n_embd) residual stream
  std::vector<float> xn_;      // (n, n_embd) normed input of the current sub-block
  std::vector<BlockQ8> xq_;    // (n, max(n_embd, q_dim, n_ff) / 32) quantized matmul input
  ActivationPack xpack_;       // xq_ rearranged for the split-layout kernels
  std::vector<float> q_, k_, v_;  // (n, q_dim) (n, kv_dim) (n, kv_dim)
  std::vector<float> attn_;    // (n, q_dim) attention output
  std::vector<float> proj_;    // (n, n_embd) sub-block output
  std::vector<float> gate_, up_;  // (n, n_ff)
  std::vector<float> rope_cos_, rope_sin_;  // (n, rope_dims / 2)
  // Attention: per worker, one chunk's scores and the partials of every chunk
  // (attention_scratch_floats); with threads, the partials of up to
  // kSplitTokens queries whose chunks are spread over the pool.
  static constexpr int64_t kSplitTokens = 4;
  int64_t max_chunks_ = 0, attn_scratch_stride_ = 0;
  std::vector<float> attn_scratch_;
  std::vector<float> attn_parts_;  // (kSplitTokens, n_kv_head, max_chunks, partial)
  std::vector<float> logits_;  // (1 or max_batch, n_vocab)
};

}  // namespace tally
