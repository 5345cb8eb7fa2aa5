#include "model/forward.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/ops.h"

namespace tally {

Forward::Forward(const Model& model, ThreadPool& pool, int64_t max_batch, int64_t n_ctx, bool all_logits)
    : model_(model), pool_(pool), max_batch_(max_batch), n_ctx_(n_ctx) {
  const auto& c = model.config();
  if (max_batch < 1) fail("batch size must be at least 1, got {}", max_batch);
  const size_t n = static_cast<size_t>(max_batch);
  const int64_t widest = std::max({c.n_embd, c.q_dim(), c.n_ff});
  x_.resize(n * c.n_embd);
  xn_.resize(n * c.n_embd);
  xq_.resize(n * (widest / 32));
  xpack_.reserve(max_batch, widest / 32);
  q_.resize(n * c.q_dim());
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  attn_.resize(n * c.q_dim());
  proj_.resize(n * c.n_embd);
  gate_.resize(n * c.n_ff);
  up_.resize(n * c.n_ff);
  rope_cos_.resize(n * c.rope_dims / 2);
  rope_sin_.resize(n * c.rope_dims / 2);
  max_chunks_ = attention_chunks(n_ctx);
  attn_scratch_stride_ = attention_scratch_floats(c.group_size(), c.head_dim, n_ctx);
  attn_scratch_.resize(static_cast<size_t>(pool.size() * attn_scratch_stride_));
  if (pool.size() > 1)
    attn_parts_.resize(static_cast<size_t>(kSplitTokens * c.n_kv_head * max_chunks_ *
                                           attention_partial_floats(c.group_size(), c.head_dim)));
  logits_.resize((all_logits ? n : 1) * static_cast<size_t>(c.n_vocab));
}

void Forward::quantize_rows(const float* x, int64_t n, int64_t dim) {
  for (int64_t t = 0; t < n; ++t) quantize_row_q8(x + t * dim, xq_.data() + t * (dim / 32), dim);
  xpack_.build(xq_.data(), n, dim / 32);
}

uint64_t Forward::attention(const KvLayerView& kv, int64_t n, int64_t start) {
  const auto& c = model_.config();
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t group = c.group_size(), hd = c.head_dim, n_kv = c.n_kv_head;
  const AttentionMode mode = hooks_ ? hooks_->attention : AttentionMode::Causal;
  // The query at position start+t may see keys [0, start+t]; the lab modes score the whole chunk.
  auto keys = [&](int64_t t) { return mode == AttentionMode::Causal ? start + t + 1 : start + n; };
  auto visible = [&](int64_t t) { return mode == AttentionMode::DenseMasked ? start + t + 1 : keys(t); };
  auto q_off = [&](int64_t t, int64_t g) { return t * c.q_dim() + g * group * hd; };
  const int64_t part = attention_partial_floats(group, hd);

  if (pool_.size() > 1 && n <= kSplitTokens) {
    // Few queries: one task per (token, kv group, chunk of keys), so that 3
    // groups still fill every thread; the chunks are merged once all are done.
    int64_t first[kSplitTokens + 1] = {0};
    for (int64_t t = 0; t < n; ++t) first[t + 1] = first[t] + n_kv * attention_chunks(keys(t));
    pool_.parallel_for(first[n], [&](int64_t b, int64_t e, int worker) {
      float* scores = attn_scratch_.data() + static_cast<size_t>(worker) * attn_scratch_stride_;
      int64_t t = 0;
      for (int64_t i = b; i < e; ++i) {
        while (i >= first[t + 1]) ++t;
        const int64_t nc = attention_chunks(keys(t)), g = (i - first[t]) / nc, ch = (i - first[t]) % nc;
        float* partial = attn_parts_.data() + ((t * n_kv + g) * max_chunks_ + ch) * part;
        attend_chunk(q_.data() + q_off(t, g), group, kv, g, ch, keys(t), visible(t), scale, scores, partial);
      }
    });
    for (int64_t t = 0; t < n; ++t)
      for (int64_t g = 0; g < n_kv; ++g)
        attention_merge(attn_parts_.data() + (t * n_kv + g) * max_chunks_ * part, attention_chunks(visible(t)), group,
                        hd, attn_.data() + q_off(t, g));
  } else {
    // One task per (token, kv group), tokens taken from both ends in turn: a
    // causal prompt's early queries see fewer keys, and each thread's range
    // of tasks then holds as many cheap ones as dear ones.
    pool_.parallel_for(n * n_kv, [&](int64_t b, int64_t e, int worker) {
      float* scratch = attn_scratch_.data() + static_cast<size_t>(worker) * attn_scratch_stride_;
      for (int64_t i = b; i < e; ++i) {
        const int64_t u = i / n_kv, g = i % n_kv, t = u % 2 == 0 ? u / 2 : n - 1 - u / 2;
        attend_group(q_.data() + q_off(t, g), group, kv, g, keys(t), scale, scratch, attn_.data() + q_off(t, g),
                     visible(t));
      }
    });
  }
  uint64_t scores = 0;
  for (int64_t t = 0; t < n; ++t) scores += static_cast<uint64_t>(c.n_head) * keys(t);
  return scores;
}

KvLayerView Forward::chunk_view(int64_t n) const {
  // k_, v_ are (n, kv_heads, head_dim) f32: one "block" holding the whole chunk.
  static const int32_t kOneBlock[1] = {0};
  const auto& c = model_.config();
  KvLayerView v;
  v.k_layer = reinterpret_cast<const uint8_t*>(k_.data());
  v.v_layer = reinterpret_cast<const uint8_t*>(v_.data());
  v.blocks = kOneBlock;
  v.length = n;
  v.block_size = n;
  v.n_kv_head = c.n_kv_head;
  v.head_dim = c.head_dim;
  v.head_stride = c.head_dim;
  v.pos_stride = c.kv_dim();
  v.type = DType::F32;
  return v;
}

void Forward::check_tokens(std::span<const int32_t> tokens, LogitsMode mode) const {
  const auto& c = model_.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < 1 || n > max_batch_) fail("forward pass takes 1 to {} tokens per call, got {}", max_batch_, n);
  if (mode == LogitsMode::All && logits_.size() < static_cast<size_t>(n * c.n_vocab))
    fail("this forward pass was set up for last-token logits only");
  for (int32_t tok : tokens)  // check before touching the cache: nothing half-written
    if (tok < 0 || tok >= c.n_vocab) fail("token id {} is outside the vocabulary [0, {})", tok, c.n_vocab);
}

void Forward::eval(KvCache& kv, KvCache::SeqId seq, std::span<const int32_t> tokens, int64_t start, LogitsMode mode) {
  check_tokens(tokens, mode);
  kv.begin_write(seq, start, static_cast<int64_t>(tokens.size()));  // refuses a start that is not the length
  run(tokens, start, mode, &kv, seq);
}

void Forward::encode(std::span<const int32_t> tokens, LogitsMode mode) {
  check_tokens(tokens, mode);
  if (static_cast<int64_t>(tokens.size()) > n_ctx_)
    fail("{} tokens exceed the context of {}", tokens.size(), n_ctx_);
  run(tokens, 0, mode, nullptr, -1);
}

void Forward::run(std::span<const int32_t> tokens, int64_t start, LogitsMode mode, KvCache* kv,
                  KvCache::SeqId seq) {
  const auto& c = model_.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff, half = c.rope_dims / 2;
  for (int64_t t = 0; t < n; ++t) {
    model_.embed(tokens[t], x_.data() + t * E);
    rope_angles(start + t, c.rope_dims, c.rope_base, rope_cos_.data() + t * half, rope_sin_.data() + t * half);
  }
  if (hooks_) hooks_->residual(0, x_.data(), n);
  uint64_t scores = 0;

  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = model_.layer(l);
    // Attention sub-block.
    for (int64_t t = 0; t < n; ++t) rms_norm(x_.data() + t * E, L.attn_norm.data(), xn_.data() + t * E, E, c.rms_eps);
    quantize_rows(xn_.data(), n, E);
    const MatmulOut qkv[] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
    matmul_many(qkv, xpack_, pool_);
    for (int64_t t = 0; t < n; ++t) {
      const float* cs = rope_cos_.data() + t * half;
      const float* sn = rope_sin_.data() + t * half;
      rope_apply(q_.data() + t * Q, c.n_head, c.head_dim, c.rope_dims, cs, sn, c.arch->rope_pairing);
      rope_apply(k_.data() + t * KV, c.n_kv_head, c.head_dim, c.rope_dims, cs, sn, c.arch->rope_pairing);
      if (kv) kv->store(l, seq, start + t, k_.data() + t * KV, v_.data() + t * KV);
    }
    scores += attention(kv ? kv->view(l, seq) : chunk_view(n), n, start);
    quantize_rows(attn_.data(), n, Q);
    matmul(L.wo, xpack_, proj_.data(), pool_);
    add_inplace(x_.data(), proj_.data(), n * E);

    // MLP sub-block.
    for (int64_t t = 0; t < n; ++t) rms_norm(x_.data() + t * E, L.ffn_norm.data(), xn_.data() + t * E, E, c.rms_eps);
    quantize_rows(xn_.data(), n, E);
    const MatmulOut gate_up[] = {{&L.ffn_gate, gate_.data()}, {&L.ffn_up, up_.data()}};
    matmul_many(gate_up, xpack_, pool_);
    silu_mul(gate_.data(), up_.data(), gate_.data(), n * F);
    quantize_rows(gate_.data(), n, F);
    matmul(L.ffn_down, xpack_, proj_.data(), pool_);
    add_inplace(x_.data(), proj_.data(), n * E);
    if (hooks_) hooks_->residual(l + 1, x_.data(), n);
  }

  for (int64_t t = 0; t < n; ++t) rms_norm(x_.data() + t * E, model_.output_norm().data(), xn_.data() + t * E, E, c.rms_eps);
  if (hooks_) hooks_->computed(n, scores);
  if (mode == LogitsMode::None) return;
  const int64_t first = mode == LogitsMode::All ? 0 : n - 1;
  quantize_rows(xn_.data() + first * E, n - first, E);
  matmul(model_.output(), xpack_, logits_.data(), pool_);
}

}  // namespace tally
