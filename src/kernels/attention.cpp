#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/attention_chunk.h"
#include "kernels/attention_ops_scalar.h"
#include "kernels/kernel_table.h"

namespace tally {

void attention_merge(const float* partials, int64_t n_chunks, int64_t n_q, int64_t head_dim, float* out) {
  const int64_t part = attention_partial_floats(n_q, head_dim);
  for (int64_t h = 0; h < n_q; ++h) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < n_chunks; ++c) m = std::fmax(m, partials[c * part + h]);
    float* o = out + h * head_dim;
    std::memset(o, 0, static_cast<size_t>(head_dim) * sizeof(float));
    float l = 0;
    for (int64_t c = 0; c < n_chunks; ++c) {
      const float* p = partials + c * part;
      // A chunk of all -inf scores weighs nothing (its sum is 0 already).
      const float f = p[h] == m ? 1.0f : std::isfinite(p[h]) ? std::exp(p[h] - m) : 0.0f;
      l += p[n_q + h] * f;
      const float* po = p + 2 * n_q + h * head_dim;
      for (int64_t i = 0; i < head_dim; ++i) o[i] += po[i] * f;
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int64_t i = 0; i < head_dim; ++i) o[i] *= inv;
  }
}

KeyRange KeyRange::resolved() const {
  return {keys, visible < 0 ? keys : std::clamp<int64_t>(visible, 0, keys), std::max<int64_t>(first, 0)};
}

const AttentionKernels& KernelTable::attention(const KvLayerView& kv) const {
  const int f = kv_format_index(kv.type);
  if (f < 0) fail("attention: no kernel reads a {} cache", dtype_name(kv.type));
  return attend[f][static_cast<int>(head_fit(kv.head_dim))];
}

bool attend_chunk(const KvLayerView& kv, const AttendArgs& a, const KeyRange& range, int64_t chunk, float* scores,
                  float* partial) {
  return kernels().attention(kv).chunk(kv, a, range, chunk, scores, partial);
}

void attend_group(const KvLayerView& kv, const AttendArgs& a, const KeyRange& range, float* scratch, float* out) {
  kernels().attention(kv).group(kv, a, range, scratch, out);
}

void attend_tokens(const KvLayerView& kv, const AttendArgs& a, const QueryRun& run, int64_t n_keys, float* scratch,
                   float* out) {
  if (run.n_tokens < 1 || run.n_tokens > kAttentionTokens)
    fail("attend_tokens takes 1 to {} queries, got {}", kAttentionTokens, run.n_tokens);
  kernels().attention(kv).tokens(kv, a, run, n_keys, scratch, out);
}

void install_scalar_attention(KernelTable& t) { install_attention<ScalarOps>(t, HeadFit::Any); }

}  // namespace tally
