#include "model/forward.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/group_layout.h"
#include "kernels/ops.h"

namespace tally {
namespace {

// The logits rows an entry asks for.
int64_t logits_rows(const StepEntry& e) {
  return e.logits == LogitsMode::All ? static_cast<int64_t>(e.tokens.size()) : e.logits == LogitsMode::Last ? 1 : 0;
}

}  // namespace

Forward::Forward(const Model& model, ThreadPool& pool, int64_t max_tokens, int64_t max_context, int64_t logit_rows)
    : model_(model), pool_(pool), max_tokens_(max_tokens), max_context_(max_context), logit_rows_(logit_rows) {
  const auto& c = model.config();
  if (max_tokens < 1) fail("batch size must be at least 1, got {}", max_tokens);
  if (max_context < 1) fail("context size must be at least 1, got {}", max_context);
  if (logit_rows < 1 || logit_rows > max_tokens) fail("logits rows must be in [1, {}], got {}", max_tokens, logit_rows);
  const size_t n = static_cast<size_t>(max_tokens);
  tok_entry_.resize(n);
  tok_pos_.resize(n);
  views_.reserve(n);
  entry_end_.reserve(n);
  entry_row_.reserve(n);
  const int64_t widest = std::max({c.n_embd, c.q_dim(), c.n_ff});
  x_.resize(n * c.n_embd);
  xn_.resize(n * c.n_embd);
  xq_.resize(n * (widest / 32));
  xpack_.reserve(max_tokens, widest / 32);
  q_.resize(n * c.q_dim());
  k_.resize(n * c.kv_dim());
  v_.resize(n * c.kv_dim());
  attn_.resize(n * c.q_dim());
  proj_.resize(n * c.n_embd);
  gate_.resize(n * c.n_ff);
  up_.resize(n * c.n_ff);
  rope_cos_.resize(n * c.rope_dims / 2);
  rope_sin_.resize(n * c.rope_dims / 2);
  if (c.window > 0) {
    rope_cos_swa_.resize(n * c.rope_dims / 2);
    rope_sin_swa_.resize(n * c.rope_dims / 2);
  }
  max_chunks_ = attention_chunks(max_context);
  // Each worker's scratch starts on a cache line, as the buffer does.
  constexpr int64_t kLineFloats = kCacheLine / sizeof(float);
  attn_scratch_stride_ = std::max(attention_scratch_floats(c.group_size(), c.head_dim, max_context),
                                  attention_tokens_scratch_floats(c.group_size(), c.head_dim, max_context));
  attn_scratch_stride_ = (attn_scratch_stride_ + kLineFloats - 1) / kLineFloats * kLineFloats;
  attn_tiles_.reserve(n);
  attn_scratch_.resize(static_cast<size_t>(pool.size() * attn_scratch_stride_));
  if (pool.size() > 1)
    attn_parts_.resize(static_cast<size_t>(kSplitTokens * c.n_kv_head * max_chunks_ *
                                           attention_partial_floats(c.group_size(), c.head_dim)));
  gather_.resize(static_cast<size_t>(logit_rows * c.n_embd));
  logits_.resize(static_cast<size_t>(logit_rows) * static_cast<size_t>(c.n_vocab));
}

template <class F>
void Forward::for_tokens(int64_t n, F&& fn) {
  if (pool_.size() > 1 && n >= kParallelTokens)
    pool_.parallel_for(n, [&](int64_t b, int64_t e, int) { fn(b, e); });
  else
    fn(0, n);
}

void Forward::quantize_rows(const float* x, int64_t n, int64_t dim) {
  xpack_.prepare(xq_.data(), n, dim / 32);
  for_tokens(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) quantize_row_q8(x + t * dim, xq_.data() + t * (dim / 32), dim);
    xpack_.pack_tokens(t0, t1);
  });
}

uint64_t Forward::attention(int64_t n, int64_t layer) {
  const auto& c = model_.config();
  const bool windowed = c.window_layer(layer);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t group = c.group_size(), hd = c.head_dim, n_kv = c.n_kv_head;
  const AttentionMode mode = hooks_ ? hooks_->attention : AttentionMode::Causal;
  // The query at position p may see keys [0, p]; the lab modes score the whole of its entry's run.
  auto keys = [&](int64_t t) {
    return mode == AttentionMode::Causal ? tok_pos_[t] + 1 : entry_end_[static_cast<size_t>(tok_entry_[t])];
  };
  auto visible = [&](int64_t t) { return mode == AttentionMode::DenseMasked ? tok_pos_[t] + 1 : keys(t); };
  // A sliding-window layer: the query at p sees keys (p - window, p].
  auto first_key = [&](int64_t t) { return windowed ? std::max<int64_t>(0, tok_pos_[t] + 1 - c.window) : 0; };
  auto first_chunk = [&](int64_t t) { return first_key(t) / kAttentionChunk; };
  auto range = [&](int64_t t) { return KeyRange{keys(t), visible(t), first_key(t)}; };
  auto view = [&](int64_t t) -> const KvLayerView& { return views_[static_cast<size_t>(tok_entry_[t])]; };
  auto q_off = [&](int64_t t, int64_t g) { return t * c.q_dim() + g * group * hd; };
  auto args = [&](int64_t t, int64_t g) { return AttendArgs{q_.data() + q_off(t, g), group, g, scale}; };
  const int64_t part = attention_partial_floats(group, hd);

  if (pool_.size() > 1 && n <= kSplitTokens) {
    // Few queries: one task per (token, kv group, chunk of keys), so that 3
    // groups still fill every thread; the chunks are merged once all are done.
    int64_t first[kSplitTokens + 1] = {0};
    for (int64_t t = 0; t < n; ++t) first[t + 1] = first[t] + n_kv * (attention_chunks(keys(t)) - first_chunk(t));
    pool_.parallel_for(first[n], [&](int64_t b, int64_t e, int worker) {
      float* scores = attn_scratch_.data() + static_cast<size_t>(worker) * attn_scratch_stride_;
      int64_t t = 0;
      for (int64_t i = b; i < e; ++i) {
        while (i >= first[t + 1]) ++t;
        const int64_t c0 = first_chunk(t), nc = attention_chunks(keys(t)) - c0;
        const int64_t g = (i - first[t]) / nc, ch = c0 + (i - first[t]) % nc;
        float* partial = attn_parts_.data() + ((t * n_kv + g) * max_chunks_ + ch - c0) * part;
        attend_chunk(view(t), args(t, g), range(t), ch, scores, partial);
      }
    });
    for (int64_t t = 0; t < n; ++t)
      for (int64_t g = 0; g < n_kv; ++g)
        attention_merge(attn_parts_.data() + (t * n_kv + g) * max_chunks_ * part,
                        attention_chunks(visible(t)) - first_chunk(t), group, hd, attn_.data() + q_off(t, g));
  } else {
    // Causal queries without a window go kAttentionTokens consecutive tokens
    // of an entry at a time (one pass over their keys); the others alone.
    attn_tiles_.clear();
    for (int64_t t = 0, len = 1; t < n; t += len) {
      len = 1;
      if (mode == AttentionMode::Causal && !windowed)
        while (len < kAttentionTokens && t + len < n && tok_entry_[t + len] == tok_entry_[t]) ++len;
      attn_tiles_.emplace_back(t, len);
    }
    // One task per (tile, kv group), tiles taken from both ends in turn: a
    // causal prompt's early queries see fewer keys, and each thread's range
    // of tasks then holds as many cheap ones as dear ones.
    const auto n_tiles = static_cast<int64_t>(attn_tiles_.size());
    pool_.parallel_for(n_tiles * n_kv, [&](int64_t b, int64_t e, int worker) {
      float* scratch = attn_scratch_.data() + static_cast<size_t>(worker) * attn_scratch_stride_;
      for (int64_t i = b; i < e; ++i) {
        const int64_t u = i / n_kv, g = i % n_kv;
        const auto [t, len] = attn_tiles_[static_cast<size_t>(u % 2 == 0 ? u / 2 : n_tiles - 1 - u / 2)];
        if (len > 1)
          attend_tokens(view(t), args(t, g), QueryRun{len, c.q_dim(), c.q_dim()}, keys(t), scratch,
                        attn_.data() + q_off(t, g));
        else
          attend_group(view(t), args(t, g), range(t), scratch, attn_.data() + q_off(t, g));
      }
    });
  }
  uint64_t scores = 0;
  for (int64_t t = 0; t < n; ++t) scores += static_cast<uint64_t>(c.n_head) * (keys(t) - first_key(t));
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

int64_t Forward::check(std::span<const StepEntry> batch, bool cached) const {
  const auto& c = model_.config();
  int64_t n = 0, rows = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepEntry& e = batch[i];
    if (e.tokens.empty()) fail("step entry {} has no tokens", i);
    n += static_cast<int64_t>(e.tokens.size());
    rows += logits_rows(e);
    for (int32_t tok : e.tokens)  // check before touching the cache: nothing half-written
      if (tok < 0 || tok >= c.n_vocab) fail("token id {} is outside the vocabulary [0, {})", tok, c.n_vocab);
    if (cached)
      for (size_t j = 0; j < i; ++j)
        if (batch[j].seq == e.seq) fail("sequence {} appears twice in one step", e.seq.index);
  }
  if (n < 1 || n > max_tokens_) fail("a forward step takes 1 to {} tokens, got {}", max_tokens_, n);
  if (rows > logit_rows_)
    fail("this forward pass returns at most {} logits rows per step, {} were asked for", logit_rows_, rows);
  return n;
}

void Forward::step(KvCache& kv, std::span<const StepEntry> batch) {
  check(batch, true);
  size_t reserved = 0;
  try {  // all sequences' positions or none: a refusal (continuity, capacity) leaves every sequence as it was
    for (; reserved < batch.size(); ++reserved)
      kv.begin_write(batch[reserved].seq, batch[reserved].start, batch[reserved].tokens);
  } catch (...) {
    for (size_t i = 0; i < reserved; ++i) kv.truncate(batch[i].seq, batch[i].start);
    throw;
  }
  run(&kv, batch);
  // A restore from the disk tier may have read on while the layers ran: its
  // checks end here, and what read a block that failed them is evaluated again.
  for (size_t i = 0; i < batch.size(); ++i)
    if (const int64_t from = kv.settle(batch[i].seq); from >= 0) evaluate_again(kv, batch, i, from);
  for (const StepEntry& e : batch)
    kv.end_write(e.seq, e.start + static_cast<int64_t>(e.tokens.size()) - e.guesses);
}

void Forward::evaluate_again(KvCache& kv, std::span<const StepEntry> batch, size_t i, int64_t from) {
  const StepEntry& e = batch[i];
  const int64_t V = model_.config().n_vocab;
  int64_t rows = 0;
  for (const StepEntry& x : batch) rows += logits_rows(x);
  // The step's other rows are kept across the runs below (this path is rare:
  // it allocates, and leaves hidden() with entry i's rows only).
  std::vector<float> kept(logits_.begin(), logits_.begin() + rows * V);
  const std::vector<int64_t> kept_rows = entry_row_;
  const std::span<const int32_t> before = kv.tokens(e.seq, from, e.start);  // run() leaves them as they are
  for (int64_t p = from; p < e.start; p += max_tokens_) {
    const auto chunk = before.subspan(static_cast<size_t>(p - from), static_cast<size_t>(std::min(max_tokens_, e.start - p)));
    const StepEntry c{e.seq, chunk, p, LogitsMode::None};
    run(&kv, {&c, 1});
  }
  run(&kv, {&e, 1});
  if (const int64_t own = logits_rows(e); own > 0) std::copy_n(logits_.begin(), own * V, kept.begin() + kept_rows[i] * V);
  std::copy(kept.begin(), kept.end(), logits_.begin());
  entry_row_ = kept_rows;
}

void Forward::eval(KvCache& kv, KvCache::SeqId seq, std::span<const int32_t> tokens, int64_t start, LogitsMode mode,
                   int64_t guesses) {
  const StepEntry e{seq, tokens, start, mode, guesses};
  step(kv, {&e, 1});
}

void Forward::encode(std::span<const int32_t> tokens, LogitsMode mode) {
  const StepEntry e{{}, tokens, 0, mode};
  check({&e, 1}, false);
  if (static_cast<int64_t>(tokens.size()) > max_context_)
    fail("{} tokens exceed the context of {}", tokens.size(), max_context_);
  run(nullptr, {&e, 1});
}

void Forward::run(KvCache* kv, std::span<const StepEntry> batch) {
  const auto& c = model_.config();
  const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff, half = c.rope_dims / 2;
  int64_t n = 0;
  entry_end_.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    const StepEntry& e = batch[i];
    for (size_t j = 0; j < e.tokens.size(); ++j, ++n) {
      tok_entry_[n] = static_cast<int32_t>(i);
      tok_pos_[n] = e.start + static_cast<int64_t>(j);
      model_.embed(e.tokens[j], x_.data() + n * E);
      if (c.arch->embed_scale) {
        const float s = std::sqrt(static_cast<float>(E));
        for (int64_t i = 0; i < E; ++i) x_[n * E + i] *= s;
      }
      rope_angles(tok_pos_[n], c.rope_dims, c.rope_base, rope_cos_.data() + n * half, rope_sin_.data() + n * half);
      if (c.window > 0)
        rope_angles(tok_pos_[n], c.rope_dims, c.rope_base_swa, rope_cos_swa_.data() + n * half,
                    rope_sin_swa_.data() + n * half);
    }
    entry_end_.push_back(e.start + static_cast<int64_t>(e.tokens.size()));
  }
  if (hooks_) hooks_->residual(0, x_.data(), n);
  uint64_t scores = 0;
  // rms_norm of each token's row of in (n, E) into out (may be in).
  auto norm_rows = [&](const float* in, const std::vector<float>& weight, float* out) {
    for_tokens(n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) rms_norm(in + t * E, weight.data(), out + t * E, E, c.rms_eps);
    });
  };
  auto add_residual = [&] {  // x_ += proj_
    for_tokens(n, [&](int64_t t0, int64_t t1) {
      add_inplace(x_.data() + t0 * E, proj_.data() + t0 * E, (t1 - t0) * E);
    });
  };

  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerWeights& L = model_.layer(l);
    // Attention sub-block.
    norm_rows(x_.data(), L.attn_norm, xn_.data());
    quantize_rows(xn_.data(), n, E);
    const MatmulOut qkv[] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
    matmul_many(qkv, xpack_, pool_);
    const bool windowed = c.window_layer(l);
    const float* cos_l = windowed ? rope_cos_swa_.data() : rope_cos_.data();
    const float* sin_l = windowed ? rope_sin_swa_.data() : rope_sin_.data();
    // Biases, q/k norms, RoPE and the cache write of token t: each token
    // touches only its own rows and cache position, so tokens run in parallel.
    auto finish_qkv = [&](int64_t t) {
      const float* cs = cos_l + t * half;
      const float* sn = sin_l + t * half;
      if (c.arch->qkv_bias) {
        add_inplace(q_.data() + t * Q, L.q_bias.data(), Q);
        add_inplace(k_.data() + t * KV, L.k_bias.data(), KV);
        add_inplace(v_.data() + t * KV, L.v_bias.data(), KV);
      }
      if (c.arch->qk_norm) {
        for (int64_t h = 0; h < c.n_head; ++h) {
          float* qh = q_.data() + t * Q + h * c.head_dim;
          rms_norm(qh, L.q_norm.data(), qh, c.head_dim, c.rms_eps);
        }
        for (int64_t h = 0; h < c.n_kv_head; ++h) {
          float* kh = k_.data() + t * KV + h * c.head_dim;
          rms_norm(kh, L.k_norm.data(), kh, c.head_dim, c.rms_eps);
        }
      }
      rope_apply(q_.data() + t * Q, c.n_head, c.head_dim, c.rope_dims, cs, sn, c.arch->rope_pairing);
      rope_apply(k_.data() + t * KV, c.n_kv_head, c.head_dim, c.rope_dims, cs, sn, c.arch->rope_pairing);
      if (kv) kv->store(l, batch[tok_entry_[t]].seq, tok_pos_[t], k_.data() + t * KV, v_.data() + t * KV);
    };
    for_tokens(n, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) finish_qkv(t);
    });
    views_.clear();
    for (const StepEntry& e : batch) views_.push_back(kv ? kv->view(l, e.seq) : chunk_view(n));
    scores += attention(n, l);
    quantize_rows(attn_.data(), n, Q);
    matmul(L.wo, xpack_, proj_.data(), pool_);
    if (c.arch->post_norms) norm_rows(proj_.data(), L.post_attn_norm, proj_.data());
    add_residual();

    // MLP sub-block.
    norm_rows(x_.data(), L.ffn_norm, xn_.data());
    quantize_rows(xn_.data(), n, E);
    const MatmulOut gate_up[] = {{&L.ffn_gate, gate_.data()}, {&L.ffn_up, up_.data()}};
    matmul_many(gate_up, xpack_, pool_);
    for_tokens(n, [&](int64_t t0, int64_t t1) {
      float* g = gate_.data() + t0 * F;
      const float* u = up_.data() + t0 * F;
      if (c.arch->ffn == FfnActivation::GeluTanh)
        gelu_tanh_mul(g, u, g, (t1 - t0) * F);
      else
        silu_mul(g, u, g, (t1 - t0) * F);
    });
    quantize_rows(gate_.data(), n, F);
    matmul(L.ffn_down, xpack_, proj_.data(), pool_);
    if (c.arch->post_norms) norm_rows(proj_.data(), L.post_ffw_norm, proj_.data());
    add_residual();
    if (hooks_) hooks_->residual(l + 1, x_.data(), n);
  }

  norm_rows(x_.data(), model_.output_norm(), xn_.data());
  if (hooks_) hooks_->computed(n, scores);

  // Logits of the rows asked for, entry by entry.
  entry_row_.clear();
  int64_t rows = 0, first = 0;
  for (const StepEntry& e : batch) {
    const int64_t m = static_cast<int64_t>(e.tokens.size());
    const int64_t from = e.logits == LogitsMode::All ? first : first + m - 1;
    const int64_t count = logits_rows(e);
    entry_row_.push_back(count > 0 ? rows : -1);
    std::copy_n(xn_.begin() + from * E, count * E, gather_.begin() + rows * E);
    rows += count;
    first += m;
  }
  if (rows == 0) return;
  quantize_rows(gather_.data(), rows, E);
  if (head_runs_.empty()) {
    matmul(model_.output(), xpack_, logits_.data(), pool_);
    return;
  }
  const WeightMatrix& out = model_.output();
  const int64_t V = out.rows;
  std::fill_n(logits_.begin(), rows * V, -INFINITY);
  for (const auto& [first, end] : head_runs_) {
    WeightMatrix part = out;  // whole groups: the run starts on one in either layout
    part.data = out.row(first);
    part.rows = end - first;
    matmul(part, xpack_, head_out_.data(), pool_);
    for (int64_t r = 0; r < rows; ++r)
      std::copy_n(head_out_.begin() + r * part.rows, part.rows, logits_.begin() + r * V + first);
  }
}

void Forward::limit_logits(int64_t prefix, std::span<const int32_t> also) {
  constexpr int64_t kGroup = kGroupRows;  // a run is whole groups in either layout
  const int64_t V = model_.output().rows;
  head_runs_.clear();
  if (prefix <= 0 || prefix >= V) {
    head_out_ = {};
    return;
  }
  std::vector<int64_t> groups;
  groups.reserve(also.size());
  for (const int32_t t : also)
    if (t >= prefix && t < V) groups.push_back(t / kGroup);
  std::sort(groups.begin(), groups.end());
  int64_t end = (prefix + kGroup - 1) / kGroup;  // in groups
  head_runs_.emplace_back(0, end);
  for (const int64_t g : groups) {
    if (g < end) continue;
    if (g == end) head_runs_.back().second = ++end;
    else head_runs_.emplace_back(g, end = g + 1);
  }
  int64_t widest = 0;
  for (auto& [first, last] : head_runs_) {
    first *= kGroup;
    last = std::min(last * kGroup, V);
    widest = std::max(widest, last - first);
  }
  head_out_.resize(static_cast<size_t>(logit_rows_ * widest));
}

}  // namespace tally
