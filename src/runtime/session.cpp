#include "runtime/session.h"

#include <algorithm>
#include <new>

#include "core/error.h"
#include "kernels/kv_quant.h"
#include "kernels/ops.h"
#include "io/session_file.h"

namespace tally {

int64_t effective_context(const Model& model, int64_t requested) {
  if (requested < 0) fail("context size must be positive, got {}", requested);
  if (requested == 0) return std::min<int64_t>(4096, model.config().n_ctx_train);
  return requested;
}

void set_cache_window(const Model& model, KvCacheOptions& o) {
  const auto& c = model.config();
  o.window = c.window;
  o.window_layers.assign(static_cast<size_t>(c.n_layer), false);
  for (int64_t l = 0; l < c.n_layer; ++l) o.window_layers[static_cast<size_t>(l)] = c.window_layer(l);
}

namespace {
KvCacheOptions cache_options(const Model& m, const SessionOptions& o) {
  KvCacheOptions k;
  k.n_ctx = effective_context(m, o.n_ctx);
  k.block_size = o.block_size;
  k.type = o.cache_type;
  k.budget_bytes = o.kv_budget;
  k.prefix_cache = false;  // one sequence: an edit reuses its prefix by truncating (reuse_prefix)
  set_cache_window(m, k);
  k.max_sequences = 1;
  k.max_batch = std::max<int64_t>(1, std::min(o.n_batch, k.n_ctx));
  return k;
}
int threads_for(int requested) {
  if (requested < 0) fail("thread count must be positive, got {}", requested);
  return requested == 0 ? ThreadPool::default_threads() : requested;
}
}  // namespace

Session::Session(const Model& model, const SessionOptions& opts) try
    : model_(model),
      opts_(opts),
      pool_(std::make_unique<ThreadPool>(threads_for(opts.n_threads))),
      cache_(model.kv_shape(), cache_options(model, opts)),
      seq_(cache_.create_sequence()),
      forward_(model, *pool_, std::max<int64_t>(1, std::min(opts.n_batch, cache_.n_ctx())), cache_.n_ctx(),
               opts.all_logits ? std::max<int64_t>(1, std::min(opts.n_batch, cache_.n_ctx())) : 1) {
  if (opts.n_batch < 1) fail("batch size must be at least 1, got {}", opts.n_batch);
} catch (const std::bad_alloc&) {
  fail("cannot allocate a session with a context of {} tokens and batches of {}: lower the context or the batch",
       effective_context(model, opts.n_ctx), opts.n_batch);
}

std::span<const float> Session::append(std::span<const int32_t> tokens, const LogitsSink& sink) {
  if (tokens.empty()) fail("nothing to evaluate: no tokens given");
  if (length() + static_cast<int64_t>(tokens.size()) > n_ctx())
    fail("{} tokens do not fit: the context holds {} and {} are in use", tokens.size(), n_ctx(), length());
  const int64_t n_vocab = model_.config().n_vocab;
  for (int32_t t : tokens)  // all chunks or none: an early chunk must not be kept when a later one is bad
    if (t < 0 || t >= n_vocab) fail("token id {} is outside the vocabulary [0, {})", t, n_vocab);
  const int64_t B = forward_.max_tokens();
  for (size_t i = 0; i < tokens.size(); i += B) {
    const auto chunk = tokens.subspan(i, std::min<size_t>(B, tokens.size() - i));
    const int64_t start = length();
    forward_.eval(cache_, seq_, chunk, start, sink ? LogitsMode::All : LogitsMode::Last);
    tokens_.insert(tokens_.end(), chunk.begin(), chunk.end());
    if (sink) sink(start, forward_.logits(), static_cast<int64_t>(chunk.size()));
  }
  const size_t last_row = sink ? (tokens.size() - 1) % B : 0;
  return {forward_.logits() + last_row * n_vocab, static_cast<size_t>(n_vocab)};
}

void Session::truncate(int64_t n) {
  const int64_t m = cache_.resume_point(seq_, n);
  const std::vector<int32_t> again(tokens_.begin() + m, tokens_.begin() + n);
  cache_.truncate(seq_, m);
  tokens_.resize(m);
  if (!again.empty()) append(again);
}

void Session::check_window(int64_t sinks) const {
  const int64_t bs = cache_.block_size();
  if (sinks < 0) fail("the number of sink tokens must be >= 0, got {}", sinks);
  if (sinks + bs + 1 > n_ctx())
    fail("a window of {} positions is too small for {} sink tokens: a slide drops a block of {} positions, so the "
         "window needs at least {} (sinks + block + 1)",
         n_ctx(), sinks, bs, sinks + bs + 1);
}

int64_t Session::slide(int64_t need, int64_t sinks) {
  const int64_t bs = cache_.block_size();
  check_window(sinks);
  if (need < 1 || sinks + bs + need > n_ctx())
    fail("a window of {} positions cannot keep {} sinks, slide by a block of {} and take {} new ones", n_ctx(), sinks,
         bs, need);
  if (length() + need <= n_ctx()) return 0;
  const int64_t over = length() + need - n_ctx();
  const int64_t n = (over + bs - 1) / bs * bs;  // whole blocks' worth, so slides are rare
  const auto& c = model_.config();
  // A rotation by -n for each RoPE base (sliding-window layers have their own).
  const size_t half = static_cast<size_t>(c.rope_dims / 2);
  std::vector<float> cs(half), sn(half), cs_swa(half), sn_swa(half);
  rope_angles(-n, c.rope_dims, c.rope_base, cs.data(), sn.data());
  rope_angles(-n, c.rope_dims, c.rope_base_swa, cs_swa.data(), sn_swa.data());
  cache_.remove_positions(seq_, sinks, n, [&](int64_t layer, float* k) {
    const bool swa = c.window_layer(layer);
    rope_apply(k, c.n_kv_head, c.head_dim, c.rope_dims, swa ? cs_swa.data() : cs.data(), swa ? sn_swa.data() : sn.data(),
               c.arch->rope_pairing);
  });
  tokens_.erase(tokens_.begin() + sinks, tokens_.begin() + sinks + n);
  return n;
}

void Session::save(const std::string& path, const std::string& meta,
                   const std::function<void(uint32_t)>& after_layer) const {
  const auto& c = model_.config();
  SessionHeader h;
  h.model_fingerprint = model_.fingerprint();
  h.cache_type = cache_.storage().type();
  h.block_size = static_cast<uint32_t>(cache_.block_size());
  h.n_layer = static_cast<uint32_t>(c.n_layer);
  h.n_kv_head = static_cast<uint32_t>(c.n_kv_head);
  h.head_dim = static_cast<uint32_t>(c.head_dim);
  h.n_tokens = tokens_.size();
  h.meta = meta;
  const uint64_t vb = h.vector_bytes();
  write_session_file(
      path, h, tokens_,
      [&](uint32_t layer, uint8_t* k, uint8_t* v) {
        for (int64_t p = 0; p < length(); ++p) {
          if (cache_.holds(layer, seq_, p)) {
            cache_.load_raw(layer, seq_, p, k + p * vb, v + p * vb);
          } else {  // a sliding-window layer's position out of its window: zeros, never read back
            std::fill_n(k + p * vb, vb, uint8_t{0});
            std::fill_n(v + p * vb, vb, uint8_t{0});
          }
        }
      },
      after_layer);
}

std::string Session::load(const std::string& path) {
  const SessionData d = read_session_file(path);
  const SessionHeader& h = d.header;
  const auto& c = model_.config();
  if (h.model_fingerprint != model_.fingerprint())
    fail("{}: the session was saved from another model (fingerprint {:016x}, this model's is {:016x})", path,
         h.model_fingerprint, model_.fingerprint());
  if (h.n_layer != c.n_layer || h.n_kv_head != c.n_kv_head || h.head_dim != c.head_dim)
    fail("{}: the session's cache shape does not match this model", path);
  if (h.cache_type != cache_.storage().type())
    fail("{}: the session holds a {} cache; this one is {} (load it into a {} cache)", path, dtype_name(h.cache_type),
         dtype_name(cache_.storage().type()), kv_cache_type_flag(h.cache_type));
  if (static_cast<int64_t>(h.n_tokens) > n_ctx())
    fail("{}: the session holds {} positions, more than this context of {} (load it into a larger context)", path, h.n_tokens, n_ctx());
  for (int32_t t : d.tokens)
    if (t < 0 || t >= c.n_vocab) fail("{}: token id {} is outside the vocabulary [0, {})", path, t, c.n_vocab);
  truncate(0);
  // In steps of a batch, as the forward pass writes: the window layers keep the last window of each.
  const int64_t n = static_cast<int64_t>(h.n_tokens), B = forward_.max_tokens();
  for (int64_t start = 0; start < n; start += B) {
    const int64_t end = std::min(n, start + B);
    cache_.begin_write(seq_, start, std::span<const int32_t>(d.tokens).subspan(start, end - start));
    for (uint32_t l = 0; l < h.n_layer; ++l)
      for (int64_t p = start; p < end; ++p)
        cache_.store_raw(l, seq_, p, d.k(l, static_cast<uint64_t>(p)), d.v(l, static_cast<uint64_t>(p)));
    cache_.end_write(seq_);
  }
  // The file holds a window layer's positions only in its window: older ones
  // (zeros where the saving cache had let them go) must not count as held.
  cache_.trim_window(seq_);
  tokens_ = d.tokens;
  return h.meta;
}

int64_t Session::reuse_prefix(std::span<const int32_t> tokens) {
  size_t keep = 0;
  while (keep < tokens_.size() && keep < tokens.size() && tokens_[keep] == tokens[keep]) ++keep;
  if (keep > 0 && keep == tokens.size()) --keep;
  truncate(static_cast<int64_t>(keep));
  return static_cast<int64_t>(keep);
}

}  // namespace tally
