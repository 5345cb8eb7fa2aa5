#include "runtime/session.h"

#include <algorithm>
#include <new>

#include "core/error.h"

namespace tally {

int64_t effective_context(const Model& model, int64_t requested) {
  if (requested < 0) fail("context size must be positive, got {}", requested);
  if (requested == 0) return std::min<int64_t>(4096, model.config().n_ctx_train);
  return requested;
}

namespace {
KvCacheOptions cache_options(const Model& m, const SessionOptions& o) {
  KvCacheOptions k;
  k.n_ctx = effective_context(m, o.n_ctx);
  k.block_size = o.block_size;
  k.type = o.cache_type;
  k.budget_bytes = o.kv_budget;
  k.prefix_cache = false;  // one sequence: an edit reuses its prefix by truncating (reuse_prefix)
  return k;
}
KvShape kv_shape(const Model& m) {
  const auto& c = m.config();
  return {c.n_layer, c.n_kv_head, c.head_dim};
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
      cache_(kv_shape(model), cache_options(model, opts)),
      seq_(cache_.create_sequence()),
      forward_(model, *pool_, std::max<int64_t>(1, std::min(opts.n_batch, cache_.n_ctx())), cache_.n_ctx(),
               opts.all_logits ? std::max<int64_t>(1, std::min(opts.n_batch, cache_.n_ctx())) : 1) {
  if (opts.n_batch < 1) fail("batch size must be at least 1, got {}", opts.n_batch);
} catch (const std::bad_alloc&) {
  fail("cannot allocate a session with a context of {} tokens and batches of {}: lower -c or --batch",
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
  cache_.truncate(seq_, n);
  tokens_.resize(n);
}

int64_t Session::reuse_prefix(std::span<const int32_t> tokens) {
  size_t keep = 0;
  while (keep < tokens_.size() && keep < tokens.size() && tokens_[keep] == tokens[keep]) ++keep;
  if (keep > 0 && keep == tokens.size()) --keep;
  truncate(static_cast<int64_t>(keep));
  return static_cast<int64_t>(keep);
}

}  // namespace tally
