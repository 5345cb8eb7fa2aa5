#pragma once
// The decoder's forward pass over one step: the tokens of one or several
// sequences, each a run at positions [start, start + n) of its own sequence
// (a prompt chunk being prefilled, or one token being decoded). Embeddings,
// pre-norm blocks (RMSNorm, attention with RoPE at the true position, RMSNorm,
// SwiGLU MLP), final norm, logits.
//
// The matrix products run over every token of the step at once (the weights
// are read once per step); each block writes the step's K/V into the cache,
// then every query attends to the keys of its own sequence that it may see.
// A token's result does not depend on what else is in the step: every kernel
// computes each (row, token) and each query the same way whatever the batch
// (tested bit for bit). All buffers are allocated in the constructor; step()
// allocates nothing (but on the rare path of a disk restore's failed check). One thread drives a Forward (the pool does the rest).
// What the lab observes goes through ForwardHooks (forward_hooks.h).
#include <cstdint>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/activation_pack.h"
#include "kernels/activation_q8.h"
#include "kernels/kv_layer_view.h"
#include "kv/kv_cache.h"
#include "model/forward_hooks.h"
#include "model/model.h"

namespace tally {

enum class LogitsMode { None, Last, All };

// One sequence's part of a step.
struct StepEntry {
  KvCache::SeqId seq;
  std::span<const int32_t> tokens;  // evaluated at positions [start, start + tokens.size())
  int64_t start = 0;                // must equal the sequence's cache length
  LogitsMode logits = LogitsMode::Last;
  int64_t guesses = 0;  // the last tokens are a draft's guesses: blocks they fill are not keyed yet (KvCache::end_write)
};

class Forward {
 public:
  // max_tokens: the most tokens one step takes (all entries together);
  // max_context: the longest sequence attended over; logit_rows: the most
  // logits rows one step returns (1 for one sequence's last token).
  Forward(const Model& model, ThreadPool& pool, int64_t max_tokens, int64_t max_context, int64_t logit_rows);

  // PRECONDITIONS: 1 <= total tokens <= max_tokens(); each entry's start is
  // its sequence's length (else the cache refuses: broken continuity), each
  // sequence at most once; the rows asked for fit logit_rows. On a refusal
  // nothing is written to any sequence.
  void step(KvCache& kv, std::span<const StepEntry> batch);
  // One sequence: step() with one entry.
  void eval(KvCache& kv, KvCache::SeqId seq, std::span<const int32_t> tokens, int64_t start, LogitsMode mode,
            int64_t guesses = 0);
  // One pass over tokens at positions [0, n) with no KV cache at all (the
  // text-encoder use): keys and values live in the step's own buffers.
  void encode(std::span<const int32_t> tokens, LogitsMode mode);

  // (rows, n_vocab): the rows of the last step, entry by entry in batch order
  // (Last: one row, All: one per token, None: none).
  const float* logits() const { return logits_.data(); }
  // The first logits row of entry i of the last step (-1 when it asked for none).
  int64_t logits_row(size_t entry) const { return entry_row_.at(entry); }
  // (n, n_embd): the final-normed hidden states of the last step's tokens.
  const float* hidden() const { return xn_.data(); }
  int64_t max_tokens() const { return max_tokens_; }
  int64_t logit_rows() const { return logit_rows_; }
  const Model& model() const { return model_; }

  // Logits of part of the vocabulary only (a draft model's: a guess outside
  // it is rarely kept, and the output matrix is a large share of a small
  // model's reads): rows [0, prefix) and the 16-row groups holding `also`
  // are computed, exactly as without the limit, the others are -infinity.
  // prefix <= 0 or >= n_vocab: every row (the default). Allocates; call it
  // between steps.
  void limit_logits(int64_t prefix, std::span<const int32_t> also);

  // An observer for the lab (nullptr: none). Not owned; must outlive its use.
  void set_hooks(ForwardHooks* hooks) { hooks_ = hooks; }

 private:
  // fn(t0, t1) over the step's n tokens: split over the pool from
  // kParallelTokens tokens on (the per-token steps between the matrices of a
  // prefill), on this thread below (waking the workers would cost a decode
  // step more than it saves). Per-token work only: the bits do not change.
  static constexpr int64_t kParallelTokens = 8;
  template <class F>
  void for_tokens(int64_t n, F&& fn);
  void quantize_rows(const float* x, int64_t n, int64_t dim);
  // Attention of the step's n tokens for one layer; returns the (query, key)
  // scores computed, summed over heads.
  // Attention of the n tokens at `layer` (a sliding-window layer sees only its window).
  uint64_t attention(int64_t n, int64_t layer);
  void run(KvCache* kv, std::span<const StepEntry> batch);
  // Entry i's positions [from, start) and its own tokens again, after a disk
  // restore's block failed its check under them (KvCache::settle); the
  // step's logits rows stay where they were.
  void evaluate_again(KvCache& kv, std::span<const StepEntry> batch, size_t i, int64_t from);
  KvLayerView chunk_view(int64_t n) const;
  int64_t check(std::span<const StepEntry> batch, bool cached) const;

  const Model& model_;
  ThreadPool& pool_;
  int64_t max_tokens_, max_context_, logit_rows_;
  ForwardHooks* hooks_ = nullptr;

  // Per token of the step: its entry and position; per entry: its view of the current layer.
  std::vector<int32_t> tok_entry_;
  std::vector<int64_t> tok_pos_;
  std::vector<KvLayerView> views_;
  std::vector<int64_t> entry_end_;  // per entry: start + its token count
  std::vector<int64_t> entry_row_;
  // Activations, row-major per token (line-aligned: the kernels' vector loads of rows do not split):
  LineVector<float> x_;       // (n, n_embd) residual stream
  LineVector<float> xn_;      // (n, n_embd) normed input of the current sub-block
  LineVector<BlockQ8> xq_;    // (n, max(n_embd, q_dim, n_ff) / 32) quantized matmul input
  ActivationPack xpack_;       // xq_ with its block sums, as the kernels read it
  LineVector<float> q_, k_, v_;  // (n, q_dim) (n, kv_dim) (n, kv_dim)
  LineVector<float> attn_;    // (n, q_dim) attention output
  LineVector<float> proj_;    // (n, n_embd) sub-block output
  LineVector<float> gate_, up_;  // (n, n_ff)
  LineVector<float> rope_cos_, rope_sin_;  // (n, rope_dims / 2)
  LineVector<float> rope_cos_swa_, rope_sin_swa_;  // the same at rope_base_swa (sliding-window layers)
  // Attention: per worker, one chunk's scores and the partials of every chunk
  // (attention_scratch_floats); with threads, the partials of up to
  // kSplitTokens queries whose chunks are spread over the pool.
  static constexpr int64_t kSplitTokens = 4;
  int64_t max_chunks_ = 0, attn_scratch_stride_ = 0;
  LineVector<float> attn_scratch_;
  std::vector<std::pair<int64_t, int64_t>> attn_tiles_;  // (first token, count): the queries attended together
  LineVector<float> attn_parts_;  // (kSplitTokens, n_kv_head, max_chunks, partial)
  LineVector<float> gather_;      // (logit_rows, n_embd): the rows whose logits are asked for
  LineVector<float> logits_;      // (logit_rows, n_vocab)
  // limit_logits: the output rows computed, as [first, end) runs of whole
  // 16-row groups in order (empty: all), and their logits before the scatter.
  std::vector<std::pair<int64_t, int64_t>> head_runs_;
  LineVector<float> head_out_;
};

}  // namespace tally
