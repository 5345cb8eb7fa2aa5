#include "lab/causal_experiment.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/session.h"

namespace tally {
namespace {

struct RunOutputs {
  std::vector<float> logits, hidden;  // (n, vocab), (n, embd)
  std::vector<std::vector<float>> k, v;  // per layer (n, kv_dim)
};

RunOutputs run(const Model& m, std::span<const int32_t> tokens, bool causal, int threads) {
  const auto& c = m.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  SessionOptions o;
  o.n_ctx = n;
  o.n_batch = n;  // one chunk: "unmasked" then means every query sees every token
  o.cache_type = DType::F32;
  o.all_logits = true;
  o.n_threads = threads;
  Session s(m, o);
  ForwardHooks mask;
  mask.attention = causal ? AttentionMode::Causal : AttentionMode::Unmasked;
  s.set_hooks(&mask);
  RunOutputs r;
  s.append(tokens, [&](int64_t, const float* l, int64_t rows) { r.logits.assign(l, l + rows * c.n_vocab); });
  r.hidden.assign(s.hidden(), s.hidden() + n * c.n_embd);
  r.k.assign(c.n_layer, std::vector<float>(n * c.kv_dim()));
  r.v.assign(c.n_layer, std::vector<float>(n * c.kv_dim()));
  for (int64_t l = 0; l < c.n_layer; ++l)
    for (int64_t p = 0; p < n; ++p)
      s.read_kv(l, p, r.k[l].data() + p * c.kv_dim(), r.v[l].data() + p * c.kv_dim());
  return r;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b, size_t count) {
  double m = 0;
  for (size_t i = 0; i < count; ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

}  // namespace

CausalReport run_causal_experiment(const Model& model, std::span<const int32_t> tokens, int n_threads) {
  if (tokens.size() < 2) fail("the causal experiment needs at least 2 tokens (N and N + 1), got {}", tokens.size());
  const auto& c = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size()) - 1;
  CausalReport rep;
  rep.n_tokens = n;
  rep.per_layer.resize(c.n_layer);
  for (bool causal : {true, false}) {
    const RunOutputs a = run(model, tokens.first(n), causal, n_threads);
    const RunOutputs b = run(model, tokens, causal, n_threads);
    const double d = std::max(max_diff(a.logits, b.logits, n * c.n_vocab), max_diff(a.hidden, b.hidden, n * c.n_embd));
    double scale = 0;
    for (float x : a.logits) scale = std::max(scale, static_cast<double>(std::fabs(x)));
    (causal ? rep.masked_max_diff : rep.unmasked_max_diff) = d;
    (causal ? rep.masked_max_relative : rep.unmasked_max_relative) = scale > 0 ? d / scale : d;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      CausalLayerDiff& L = rep.per_layer[l];
      L.layer = l;
      const size_t count = static_cast<size_t>(n * c.kv_dim());
      (causal ? L.masked_k : L.unmasked_k) = max_diff(a.k[l], b.k[l], count);
      (causal ? L.masked_v : L.unmasked_v) = max_diff(a.v[l], b.v[l], count);
    }
  }
  return rep;
}

}  // namespace tally
