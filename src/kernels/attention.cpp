#include "kernels/attention.h"

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

bool attend_chunk(const float* q, int64_t n_q, const KvLayerView& kv, int64_t kv_head, int64_t chunk, int64_t n_keys,
                  int64_t n_visible, float scale, float* scores, float* partial, int64_t first_visible) {
  return kernels().attend_chunk(q, n_q, kv, kv_head, chunk, n_keys, n_visible, scale, scores, partial, first_visible);
}

void attend_group(const float* q, int64_t n_q, const KvLayerView& kv, int64_t kv_head, int64_t n_keys, float scale,
                  float* scratch, float* out, int64_t n_visible, int64_t first_visible) {
  kernels().attend_group(q, n_q, kv, kv_head, n_keys, scale, scratch, out, n_visible, first_visible);
}

void attend_tokens(const float* q, int64_t q_stride, int64_t n_tokens, int64_t n_q, const KvLayerView& kv,
                   int64_t kv_head, int64_t n_keys, float scale, float* scratch, float* out, int64_t out_stride) {
  if (n_tokens < 1 || n_tokens > kAttentionTokens)
    fail("attend_tokens takes 1 to {} queries, got {}", kAttentionTokens, n_tokens);
  kernels().attend_tokens(q, q_stride, n_tokens, n_q, kv, kv_head, n_keys, scale, scratch, out, out_stride);
}

void install_scalar_attention(KernelTable& t) {
  t.attend_chunk = attend_chunk_impl<ScalarOps>;
  t.attend_group = attend_group_impl<ScalarOps>;
  t.attend_tokens = attend_tokens_impl<ScalarOps>;
}

}  // namespace tally
