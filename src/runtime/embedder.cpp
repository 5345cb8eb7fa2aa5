#include "runtime/embedder.h"

#include "core/error.h"
#include "core/printable.h"
#include "model/forward.h"
#include "core/thread_pool.h"

namespace tally {

Pooling pooling_from_name(std::string_view name) {
  if (name == "none") return Pooling::None;
  if (name == "mean") return Pooling::Mean;
  if (name == "last") return Pooling::Last;
  fail("the pooling must be none, mean or last, got '{}'", excerpt(name));
}

Embedding embed(const Model& model, std::span<const int32_t> tokens, int64_t layer, Pooling pool, int n_threads) {
  ThreadPool threads(n_threads > 0 ? n_threads : ThreadPool::default_threads());
  return embed(model, tokens, layer, pool, threads);
}

Embedding embed(const Model& model, std::span<const int32_t> tokens, int64_t layer, Pooling pool, ThreadPool& threads) {
  const auto& c = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) fail("nothing to embed: the prompt has no tokens");
  if (layer < -1 || layer > c.n_layer) fail("the layer must be between 0 and {} (the blocks of this model), got {}", c.n_layer, layer);
  if (layer == -1) layer = c.n_layer;
  Forward f(model, threads, n, n, 1);
  const bool final_norm = layer == c.n_layer;
  // Keeps a copy of the residual stream after block `layer`.
  struct Capture : ForwardHooks {
    int64_t layer = 0, dim = 0;
    std::vector<float> x;
    void residual(int64_t l, const float* h, int64_t rows) override {
      if (l == layer) x.assign(h, h + rows * dim);
    }
  } capture;
  capture.layer = layer;
  capture.dim = c.n_embd;
  if (!final_norm) f.set_hooks(&capture);
  f.encode(tokens, LogitsMode::None);
  const float* h = final_norm ? f.hidden() : capture.x.data();

  Embedding e;
  e.dim = c.n_embd;
  if (pool == Pooling::None) {
    e.rows = n;
    e.values.assign(h, h + n * c.n_embd);
  } else if (pool == Pooling::Last) {
    e.rows = 1;
    e.values.assign(h + (n - 1) * c.n_embd, h + n * c.n_embd);
  } else {
    e.rows = 1;
    e.values.assign(c.n_embd, 0.0f);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < c.n_embd; ++i) e.values[i] += h[t * c.n_embd + i] / static_cast<float>(n);
  }
  return e;
}

}  // namespace tally
