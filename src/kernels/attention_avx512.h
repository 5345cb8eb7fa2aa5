#pragma once
// The AVX-512 kernels of one attention chunk (see kernels/attention.cpp for
// what each primitive computes; ScalarOps there is their reference). Each
// returns false, doing nothing, for a shape it does not handle (head sizes
// that are not a multiple of 16, groups of more than 8 heads, non-finite
// scores); the caller then uses its AVX2 or scalar kernel. Call only when
// simd_at_least(SimdLevel::Avx512Vnni).
#include <cstdint>

#include "core/dtype.h"
#include "kernels/kv_layer_view.h"

namespace tally::avx512_attention {

// scores[h * stride + j] = (q_h . k_j) * scale for m keys `step` bytes apart.
// A key's score is the same bits whether it is summed with 15 other keys or alone.
bool dots_block(const float* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t head_dim, DType t,
                float scale, float* scores, int64_t stride);
// x[j] = exp(x[j] - max): writes the max and the sum of the exponentials.
bool exp_sum(float* x, int64_t n, float* max_out, float* sum_out);
// out_h = sum over positions p in [b, e) of w[h * stride + p - b] * v_p, for the n_q heads.
bool weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t kv_head,
                  int64_t b, int64_t e);

}  // namespace tally::avx512_attention
