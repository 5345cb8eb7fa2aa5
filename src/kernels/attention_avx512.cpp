// The AVX-512 attention kernels (compiled with -mavx512f/bw/vl/vnni besides AVX2;
// called only when the CPU has them). They are installed for head sizes that
// fill 16-float vectors (any group, as groups of up to 8 heads); other head
// sizes keep the AVX2 kernels in the table. A chunk whose scores are not all
// finite goes to the scalar softmax.
// Q8_0 / Q4_0 caches: integer dots of 16 keys per pass (vpdpbusd), whose
// float steps are the AVX2 kernels' lane by lane.
#include "kernels/attention_ops_avx2.h"  // first: it includes <immintrin.h>

#include <cmath>
#include <limits>

#include "kernels/attention_chunk.h"
#include "kernels/attention_runs.h"
#include "kernels/exp_simd.h"
#include "kernels/kernel_table.h"

namespace tally {

#ifdef TALLY_TU_AVX512
namespace {
namespace avx512 {

// The helpers pass vectors in arrays: they must inline to keep them in registers.
// (Not under emulation, where forced inlining of the emulated intrinsics makes
// this file take minutes to compile.)
#if defined(TALLY_EMULATE_SIMD)
#define TALLY_ALWAYS_INLINE inline
#else
#define TALLY_ALWAYS_INLINE inline __attribute__((always_inline))
#endif

template <bool kF32>
TALLY_ALWAYS_INLINE __m512 load16(const uint8_t* p, int64_t i) {
  return kF32 ? _mm512_loadu_ps(reinterpret_cast<const float*>(p) + i)
              : _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2 * i)));
}

// Sum of 16 lanes by halving: lanes (i, i+8), then (i, i+4), (i, i+2), (i, i+1).
// transpose_sums below adds in exactly this tree (float addition commutes
// exactly), so a key's score does not depend on which kernel summed it.
TALLY_ALWAYS_INLINE float hsum16(__m512 a) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a), hi);
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// The four steps of 16 lane sums done 16 vectors at a time (a transpose that adds):
// two vectors -> their (i, i+8) sums, 8 lanes each;
TALLY_ALWAYS_INLINE __m512 halve1(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
}
// two of those -> (i, i+4) sums of 4 vectors, one per 128-bit lane;
TALLY_ALWAYS_INLINE __m512 halve2(__m512 u, __m512 v) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(u, v, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(u, v, _MM_SHUFFLE(3, 1, 3, 1)));
}
// two of those (vectors 0-3, 4-7) -> lane j: (i, i+2) sums of vectors j, 4+j, j, 4+j;
TALLY_ALWAYS_INLINE __m512 halve3(__m512 s, __m512 t) {
  return _mm512_add_ps(_mm512_unpacklo_ps(s, t), _mm512_unpackhi_ps(s, t));
}
// two of those (vectors 0-7, 8-15) -> lane 4j + m: the full sum of vector 4m + j.
TALLY_ALWAYS_INLINE __m512 halve4(__m512 r, __m512 w) {
  return _mm512_add_ps(_mm512_shuffle_ps(r, w, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(r, w, _MM_SHUFFLE(3, 2, 3, 2)));
}

// acc[h] = q_h * k lane-wise, summed over the head's 16-float slices in order.
// ND: the head's count of slices when fixed at compile time (fully unrolled), 0 if not.
template <int NQ, int ND, bool kF32>
TALLY_ALWAYS_INLINE void key_products(const float* q, const uint8_t* k, int64_t n, __m512* acc) {
  const int64_t nd = ND > 0 ? ND : n / 16;
  for (int h = 0; h < NQ; ++h) acc[h] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nd; ++i) {
    const __m512 kv = load16<kF32>(k, 16 * i);
    for (int h = 0; h < NQ; ++h) acc[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * n + 16 * i), kv, acc[h]);
  }
}

// Four consecutive keys -> per head, their (i, i+4) sums (halve2 layout).
template <int NQ, int ND, bool kF32>
TALLY_ALWAYS_INLINE void four_keys(const float* q, const uint8_t* k, uint64_t step, int64_t n,
                                                __m512* out) {
  __m512 a[NQ], b[NQ], p01[NQ];
  key_products<NQ, ND, kF32>(q, k, n, a);
  key_products<NQ, ND, kF32>(q, k + step, n, b);
  for (int h = 0; h < NQ; ++h) p01[h] = halve1(a[h], b[h]);
  key_products<NQ, ND, kF32>(q, k + 2 * step, n, a);
  key_products<NQ, ND, kF32>(q, k + 3 * step, n, b);
  for (int h = 0; h < NQ; ++h) out[h] = halve2(p01[h], halve1(a[h], b[h]));
}

// Sixteen consecutive keys: one vector of scores per head, no per-key horizontal sum.
template <int NQ, int ND, bool kF32>
TALLY_ALWAYS_INLINE void sixteen_keys(const float* q, const uint8_t* k, uint64_t step, int64_t n,
                                                   __m512 vscale, float* scores, int64_t stride) {
  __m512 s0[NQ], s1[NQ], r0[NQ];
  four_keys<NQ, ND, kF32>(q, k, step, n, s0);
  four_keys<NQ, ND, kF32>(q, k + 4 * step, step, n, s1);
  for (int h = 0; h < NQ; ++h) r0[h] = halve3(s0[h], s1[h]);
  four_keys<NQ, ND, kF32>(q, k + 8 * step, step, n, s0);
  four_keys<NQ, ND, kF32>(q, k + 12 * step, step, n, s1);
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int h = 0; h < NQ; ++h) {
    const __m512 r = _mm512_permutexvar_ps(order, halve4(r0[h], halve3(s0[h], s1[h])));
    _mm512_storeu_ps(scores + h * stride, _mm512_mul_ps(r, vscale));
  }
}

template <int NQ, int ND, bool kF32>
void dots_t(const float* q, const uint8_t* k, int64_t m, uint64_t step, int64_t n, float scale,
                         float* scores, int64_t stride) {
  const __m512 vscale = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= m; j += 16) sixteen_keys<NQ, ND, kF32>(q, k + j * step, step, n, vscale, scores + j, stride);
  for (; j < m; ++j) {
    __m512 acc[NQ];
    key_products<NQ, ND, kF32>(q, k + j * step, n, acc);
    for (int h = 0; h < NQ; ++h) scores[h * stride + j] = hsum16(acc[h]) * scale;
  }
}

// The model head sizes (64, 128) get fully unrolled kernels.
template <int NQ, bool kF32>
void dots_n(const float* q, const uint8_t* k, int64_t m, uint64_t step, int64_t n, float scale, float* scores,
            int64_t stride) {
  if (n == 64) return dots_t<NQ, 4, kF32>(q, k, m, step, n, scale, scores, stride);
  if (n == 128) return dots_t<NQ, 8, kF32>(q, k, m, step, n, scale, scores, stride);
  dots_t<NQ, 0, kF32>(q, k, m, step, n, scale, scores, stride);
}

// Values of a slice of W 16-float vectors starting at dimension d0, for NQ
// heads: the NQ * W partial outputs stay in registers over all the keys.
template <int NQ, int W, bool kF32>
void weighted_sum_t(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                                 int64_t b, int64_t e) {
  const int64_t hd = kv.head_dim;
  for (int64_t d0 = 0; d0 < hd; d0 += 16 * W) {
    __m512 acc[NQ][W];
    for (int h = 0; h < NQ; ++h)
      for (int u = 0; u < W; ++u) acc[h][u] = _mm512_setzero_ps();
    for (KvRuns r(kv, kv.v_layer, g, b, e); r.next();) {
      // The values past this run into L1 (the chunk kernel brought them to L2).
      if (d0 == 0)
        prefetch_positions<true>(kv, kv.v_layer, g, r.pos + r.count, std::min(r.pos + r.count + kPrefetchAhead, e));
      const float* wp = w + (r.pos - b);
      const uint8_t* v = r.ptr;
      for (int64_t j = 0; j < r.count; ++j, v += r.step) {
        __m512 vv[W];
        for (int u = 0; u < W; ++u) vv[u] = load16<kF32>(v, d0 + 16 * u);
        for (int h = 0; h < NQ; ++h) {
          const __m512 wv = _mm512_set1_ps(wp[h * stride + j]);
          for (int u = 0; u < W; ++u) acc[h][u] = _mm512_fmadd_ps(wv, vv[u], acc[h][u]);
        }
      }
    }
    for (int h = 0; h < NQ; ++h)
      for (int u = 0; u < W; ++u) _mm512_storeu_ps(out + h * hd + d0 + 16 * u, acc[h][u]);
  }
}

// The widest slice (4, 2 or 1 vectors) that divides the head and keeps at most 16 accumulators.
template <int NQ, bool kF32>
void weighted_sum_n(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g, int64_t b,
                    int64_t e) {
  const int64_t nv = kv.head_dim / 16;
  if (NQ * 4 <= 16 && nv % 4 == 0) return weighted_sum_t<NQ, 4, kF32>(out, w, stride, kv, g, b, e);
  if (nv % 2 == 0) return weighted_sum_t<NQ, 2, kF32>(out, w, stride, kv, g, b, e);
  weighted_sum_t<NQ, 1, kF32>(out, w, stride, kv, g, b, e);
}

// scores[h * stride + j] = (q_h . k_j) * scale for m keys `step` bytes apart.
// A key's score is the same bits whether it is summed with 15 other keys or alone.
template <class Fmt>
void dots_block(const float* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t head_dim,
                float scale, float* scores, int64_t stride) {
  for_head_groups(n_q, [&]<int NQ>(int64_t h0) {
    dots_n<NQ, Fmt::kF32>(q + h0 * head_dim, k, m, step, head_dim, scale, scores + h0 * stride, stride);
  });
}

// x[j] = exp(x[j] - max), writing the max and the sum; false when the max is not finite.
bool exp_sum(float* x, int64_t n, float* max_out, float* sum_out) {
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __mmask16 tail = static_cast<__mmask16>((1u << (n % 16)) - 1);
  const int64_t full = n - n % 16;
  __m512 vmax = neg_inf;
  for (int64_t i = 0; i < full; i += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(x + i));
  if (tail) vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(neg_inf, tail, x + full));
  const float mx = _mm512_reduce_max_ps(vmax);
  if (!std::isfinite(mx)) return false;
  const __m512 vm = _mm512_set1_ps(mx);
  __m512 vsum = _mm512_setzero_ps();
  for (int64_t i = 0; i < full; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    _mm512_storeu_ps(x + i, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  if (tail) {  // the lanes past n hold -inf - max: exp gives exactly 0
    const __m512 e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, tail, x + full), vm));
    _mm512_mask_storeu_ps(x + full, tail, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  *max_out = mx;
  *sum_out = hsum16(vsum);
  return true;
}

// out_h = sum over positions p in [b, e) of w[h * stride + p - b] * v_p for f32 / f16 values.
template <class Fmt>
void weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t kv_head,
                  int64_t b, int64_t e) {
  for_head_groups(n_q, [&]<int NQ>(int64_t h0) {
    weighted_sum_n<NQ, Fmt::kF32>(out + h0 * kv.head_dim, w + h0 * stride, stride, kv, kv_head, b, e);
  });
}

// --- Q8_0 / Q4_0 keys and values (the query quantized: QueryBlock) ---

// A key block's 32 values as the unsigned bytes vpdpbusd takes, with
// q . k = u . q - offset * sum(q): Q8_0's k + 128 (the sign bit flipped,
// offset 128), Q4_0's nibbles in value order (offset 8).
template <class Fmt>
TALLY_ALWAYS_INLINE __m256i key_bytes(const uint8_t* kb) {
  if constexpr (Fmt::kQ4) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kb + kKvScaleBytes));
    const __m128i lo = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), lo), _mm_and_si128(x, lo));
  } else {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kb + kKvScaleBytes)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  }
}

// Lane j: the sum of key j's 8 int32 lanes (exact: integers), for 16 keys held
// two to a vector: d[p] has key (p % 4) + 8 (p / 4) in its low half and the
// key 4 above it in its high half, which makes the transpose-add end in key order.
TALLY_ALWAYS_INLINE __m512i key_sums16(const __m512i* d) {
  __m512i w[4];
  for (int i = 0; i < 4; ++i)  // 128-bit lane: keys a, b of the pair, two partial sums each
    w[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(d[2 * i], d[2 * i + 1]), _mm512_unpackhi_epi32(d[2 * i], d[2 * i + 1]));
  // 128-bit lane: four keys' sums of that lane's partials.
  const __m512i x0 = _mm512_add_epi32(_mm512_unpacklo_epi64(w[0], w[1]), _mm512_unpackhi_epi64(w[0], w[1]));
  const __m512i x1 = _mm512_add_epi32(_mm512_unpacklo_epi64(w[2], w[3]), _mm512_unpackhi_epi64(w[2], w[3]));
  return _mm512_add_epi32(_mm512_shuffle_i32x4(x0, x1, _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_i32x4(x0, x1, _MM_SHUFFLE(3, 1, 3, 1)));
}

// Sixteen keys at a time, one block at a time: the keys' bytes are prepared
// once for all heads, and each block's 16 integer sums come out in one vector.
// The float step s = s + float(isum) * (d_k * d_q) is the AVX2 kernel's and
// the scalar twin's, lane by lane; fewer than 16 keys go to the AVX2 kernel.
template <int NQ, class Fmt>
void dots_q_t(const QueryBlock* q, const uint8_t* k, int64_t m, uint64_t step, int64_t n, float scale,
              float* scores, int64_t stride) {
  const int64_t nb = n / kKvBlockValues, bb = Fmt::kBlockBytes;
  const int32_t offset = Fmt::kQ4 ? 8 : 128;
  const __m512 vscale = _mm512_set1_ps(scale);
  int64_t j = 0;
  for (; j + 16 <= m; j += 16, k += 16 * step) {
    __m512 acc[NQ];
    for (int h = 0; h < NQ; ++h) acc[h] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* kb = k + b * bb;
      __m512i u[8];
      for (int p = 0; p < 8; ++p) {
        const uint8_t* key = kb + static_cast<uint64_t>((p % 4) + 8 * (p / 4)) * step;
        u[p] = _mm512_inserti64x4(_mm512_castsi256_si512(key_bytes<Fmt>(key)), key_bytes<Fmt>(key + 4 * step), 1);
      }
      alignas(32) uint16_t dh[16];
      for (int i = 0; i < 16; ++i) std::memcpy(&dh[i], kb + i * step, 2);
      const __m512 dk = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dh)));
      for (int h = 0; h < NQ; ++h) {
        const QueryBlock& qb = q[h * nb + b];
        const __m512i qv = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb.q)));
        __m512i d[8];
        for (int p = 0; p < 8; ++p) d[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[p], qv);
        const __m512i isum = _mm512_sub_epi32(key_sums16(d), _mm512_set1_epi32(offset * qb.sum));
        acc[h] = _mm512_add_ps(acc[h], _mm512_mul_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dk, _mm512_set1_ps(qb.d))));
      }
    }
    for (int h = 0; h < NQ; ++h) _mm512_storeu_ps(scores + h * stride + j, _mm512_mul_ps(acc[h], vscale));
  }
  if (j < m) Avx2Ops::dots_block_q<Fmt>(q, NQ, k, m - j, step, n, scale, scores + j, stride);
}

// The quantized twin of dots_block.
template <class Fmt>
void dots_block_q(const QueryBlock* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                  float scale, float* scores, int64_t stride) {
  for_head_groups(n_q, [&]<int NQ>(int64_t h0) {
    dots_q_t<NQ, Fmt>(q + h0 * (n / kKvBlockValues), k, m, step, n, scale, scores + h0 * stride, stride);
  });
}

// A value block's 32 values as two 16-float vectors, without the block's scale.
template <class Fmt>
TALLY_ALWAYS_INLINE void value_floats(const uint8_t* vb, __m512* out) {
  const uint8_t* x8 = vb + kKvScaleBytes;
  if constexpr (Fmt::kQ4) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x8));
    const __m128i lo = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    out[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(x, lo), eight)));
    out[1] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(x, 4), lo), eight)));
  } else {
    for (int u = 0; u < 2; ++u)
      out[u] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x8 + 16 * u))));
  }
}

// One 32-value block of the head at a time, outer; keys inner: each key's
// scale is folded into its weight once per head, and out += c * v is one FMA
// per lane in key order, as in the AVX2 kernel (so the two agree bit for bit).
template <int NQ, class Fmt>
void weighted_sum_q_t(float* out, const float* w, int64_t stride, const KvLayerView& kv, int64_t g, int64_t b,
                      int64_t e) {
  const int64_t hd = kv.head_dim, bb = Fmt::kBlockBytes;
  for (int64_t blk = 0; blk < hd / kKvBlockValues; ++blk) {
    __m512 acc[NQ][2];
    for (int h = 0; h < NQ; ++h) acc[h][0] = acc[h][1] = _mm512_setzero_ps();
    for (KvRuns r(kv, kv.v_layer, g, b, e); r.next();) {
      if (blk == 0)
        prefetch_positions<true>(kv, kv.v_layer, g, r.pos + r.count, std::min(r.pos + r.count + kPrefetchAhead, e));
      const float* wp = w + (r.pos - b);
      const uint8_t* v = r.ptr + blk * bb;
      for (int64_t j = 0; j < r.count; ++j, v += r.step) {
        uint16_t dh;
        std::memcpy(&dh, v, 2);
        const float d = _cvtsh_ss(dh);
        __m512 vv[2];
        value_floats<Fmt>(v, vv);
        for (int h = 0; h < NQ; ++h) {
          const __m512 c = _mm512_set1_ps(wp[h * stride + j] * d);
          acc[h][0] = _mm512_fmadd_ps(c, vv[0], acc[h][0]);
          acc[h][1] = _mm512_fmadd_ps(c, vv[1], acc[h][1]);
        }
      }
    }
    for (int h = 0; h < NQ; ++h)
      for (int u = 0; u < 2; ++u) _mm512_storeu_ps(out + h * hd + kKvBlockValues * blk + 16 * u, acc[h][u]);
  }
}

template <class Fmt>
void weighted_sum_q(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                    int64_t b, int64_t e) {
  for_head_groups(n_q, [&]<int NQ>(int64_t h0) {
    weighted_sum_q_t<NQ, Fmt>(out + h0 * kv.head_dim, w + h0 * stride, stride, kv, g, b, e);
  });
}

// --- A prefill's many rows against the same keys: rows in vector lanes ---
// A chunk of attend_tokens for F32 / F16 caches with the rows (query i's head
// h: row i * n_q + h) in the lanes of 16-row blocks: one broadcast of a key or
// value element meets 16 rows in one FMA, each key and value is converted
// once for all rows, and no score needs a horizontal sum. Every score, softmax
// sum and output takes attend_group's steps in attend_group's order (the
// vertical adds follow hsum16's tree), so the results are its bits.

// Widest head taken (one key converted on the stack).
constexpr int64_t kLanesMaxHead = 256;

// One key's scores for NB row blocks (qt: rows_in_lanes, `qb` floats per
// block): lane_tree<Span> sums lanes l, l + Span, ... of the 16 lane sums, a
// leaf (Span 16) being lane l's FMA chain over the head's 16-float slices.
template <int NB, int ND, int Span>
TALLY_ALWAYS_INLINE void lane_tree(const float* qt, int64_t qb, const float* k, int64_t n, int l, __m512* out) {
  if constexpr (Span == 16) {
    const int64_t nd = ND > 0 ? ND : n / 16;
    const int64_t step = ND > 0 ? 256 * ND : qb;  // a constant: one base register for every load
    for (int b = 0; b < NB; ++b) out[b] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nd; ++i) {
      const __m512 kv = _mm512_set1_ps(k[16 * i + l]);
      for (int b = 0; b < NB; ++b)
        out[b] = _mm512_fmadd_ps(_mm512_loadu_ps(qt + b * step + (16 * i + l) * 16), kv, out[b]);
    }
  } else {
    __m512 lo[NB], hi[NB];
    lane_tree<NB, ND, Span * 2>(qt, qb, k, n, l, lo);
    lane_tree<NB, ND, Span * 2>(qt, qb, k, n, l + Span, hi);
    for (int b = 0; b < NB; ++b) out[b] = _mm512_add_ps(lo[b], hi[b]);
  }
}

// st[j * R + r] = row r's score of key j, for m keys `step` bytes apart and NB blocks of rows.
template <int NB, int ND, bool kF32>
void dots_lanes_t(const float* qt, int64_t qb, const uint8_t* k, int64_t m, uint64_t step, int64_t n, float scale,
                  float* st, int64_t R) {
  const __m512 vscale = _mm512_set1_ps(scale);
  alignas(64) float kf[kLanesMaxHead];
  for (int64_t j = 0; j < m; ++j, k += step) {
    const float* key = reinterpret_cast<const float*>(k);
    if constexpr (!kF32) {
      for (int64_t d = 0; d < n; d += 16) _mm512_store_ps(kf + d, load16<false>(k, d));
      key = kf;
    }
    // The broadcasts are to be loads from kf (g++ would make them shuffles of
    // the converted vectors), and qt is read where it is used, not copied to
    // the stack ahead of the loop.
    asm volatile("" ::: "memory");
    __m512 sc[NB];
    lane_tree<NB, ND, 1>(qt, qb, key, n, 0, sc);
    for (int b = 0; b < NB; ++b) _mm512_storeu_ps(st + j * R + 16 * b, _mm512_mul_ps(sc[b], vscale));
  }
}

template <int NB, bool kF32>
void dots_lanes_n(const float* qt, int64_t qb, const uint8_t* k, int64_t m, uint64_t step, int64_t n, float scale,
                  float* st, int64_t R) {
  if (n == 64) return dots_lanes_t<NB, 4, kF32>(qt, qb, k, m, step, n, scale, st, R);
  if (n == 128) return dots_lanes_t<NB, 8, kF32>(qt, qb, k, m, step, n, scale, st, R);
  if (n == 256) return dots_lanes_t<NB, 16, kF32>(qt, qb, k, m, step, n, scale, st, R);
  dots_lanes_t<NB, 0, kF32>(qt, qb, k, m, step, n, scale, st, R);
}

// All R / 16 row blocks, up to 4 at a time (their adding trees in registers)
// and no more than keep their queries in L1 (32 KB: every key reads them all).
template <bool kF32>
void dots_lanes(const float* qt, int64_t R, const uint8_t* k, int64_t m, uint64_t step, int64_t n, float scale,
                float* st) {
  const int64_t qb = 16 * n, most = std::clamp<int64_t>(512 / n, 1, 4);
  for (int64_t b0 = 0; b0 < R / 16; b0 += most) {
    const float* q = qt + b0 * qb;
    float* out = st + 16 * b0;
    switch (std::min(most, R / 16 - b0)) {
      case 1: dots_lanes_n<1, kF32>(q, qb, k, m, step, n, scale, out, R); break;
      case 2: dots_lanes_n<2, kF32>(q, qb, k, m, step, n, scale, out, R); break;
      case 3: dots_lanes_n<3, kF32>(q, qb, k, m, step, n, scale, out, R); break;
      default: dots_lanes_n<4, kF32>(q, qb, k, m, step, n, scale, out, R); break;
    }
  }
}

// The softmax of one row block down the m keys of st (stride R): lane r's
// keys j < seen[r] become exp(s - max), the others 0, and max and sum come
// out as exp_sum gives them (its lane sums are acc[j % 16] here, added in its
// tree). A lane with a score that is not finite takes exp_sum itself.
void softmax_lanes(float* st, int64_t R, int64_t m, const int32_t* seen, float* mx, float* sum) {
  const __m512i vseen = _mm512_loadu_si512(seen);
  const __m512 zero = _mm512_setzero_ps();
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 bad = zero;  // sum of x * 0: NaN in a lane once it sees an inf or NaN score
  for (int64_t j = 0; j < m; ++j) {
    const __mmask16 in = _mm512_cmpgt_epi32_mask(vseen, _mm512_set1_epi32(static_cast<int32_t>(j)));
    const __m512 x = _mm512_loadu_ps(st + j * R);
    vmax = _mm512_mask_max_ps(vmax, in, vmax, x);
    bad = _mm512_mask_mov_ps(bad, in, _mm512_fmadd_ps(x, zero, bad));
  }
  const __mmask16 odd = _mm512_cmp_ps_mask(bad, zero, _CMP_NEQ_UQ);
  alignas(64) float odd_max[16], odd_sum[16];
  for (int r = 0; r < 16; ++r) {
    if (!(odd >> r & 1)) continue;
    float col[kAttentionChunk];
    for (int64_t j = 0; j < seen[r]; ++j) col[j] = st[j * R + r];
    if (!exp_sum(col, seen[r], &odd_max[r], &odd_sum[r])) odd_sum[r] = ScalarOps::exp_sum(col, seen[r], &odd_max[r]);
    for (int64_t j = 0; j < m; ++j) st[j * R + r] = j < seen[r] ? col[j] : 0.0f;
  }
  // Whole groups of 16 keys (st has kAttentionChunk of them), so that acc
  // stays in registers: the keys past m are past every lane's seen, weigh 0.
  __m512 acc[16];
  for (int l = 0; l < 16; ++l) acc[l] = zero;
  for (int64_t j0 = 0; j0 < m; j0 += 16)
#pragma GCC unroll 16
    for (int l = 0; l < 16; ++l) {
      float* x = st + (j0 + l) * R;
      const __mmask16 in = _mm512_cmpgt_epi32_mask(vseen, _mm512_set1_epi32(static_cast<int32_t>(j0 + l)));
      const __m512 e = _mm512_maskz_mov_ps(in, exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(zero, in, x), vmax)));
      _mm512_mask_storeu_ps(x, static_cast<__mmask16>(~odd), e);
      acc[l] = _mm512_add_ps(acc[l], e);
    }
  for (int s = 8; s > 0; s /= 2)
    for (int l = 0; l < s; ++l) acc[l] = _mm512_add_ps(acc[l], acc[l + s]);
  _mm512_storeu_ps(mx, _mm512_mask_loadu_ps(vmax, odd, odd_max));
  _mm512_storeu_ps(sum, _mm512_mask_loadu_ps(acc[0], odd, odd_sum));
}

// o (NB row blocks x 8 dimensions, as O^T at oT[d * R + r]) = the weights of
// keys [0, m) (wt[j * R + r]) times their values (vf[j * n + d]), each sum an
// FMA chain from 0 in key order as in weighted_sum_t.
template <int NB>
TALLY_ALWAYS_INLINE void values_lanes_t(const float* wt, int64_t R, const float* vf, int64_t n, int64_t m, float* oT) {
  __m512 acc[NB][8];
  for (int b = 0; b < NB; ++b)
    for (int t = 0; t < 8; ++t) acc[b][t] = _mm512_setzero_ps();
  for (int64_t j = 0; j < m; ++j) {
    __m512 w[NB];
    for (int b = 0; b < NB; ++b) w[b] = _mm512_loadu_ps(wt + j * R + 16 * b);
    for (int t = 0; t < 8; ++t) {
      const __m512 v = _mm512_set1_ps(vf[j * n + t]);
      for (int b = 0; b < NB; ++b) acc[b][t] = _mm512_fmadd_ps(w[b], v, acc[b][t]);
    }
  }
  for (int b = 0; b < NB; ++b)
    for (int t = 0; t < 8; ++t) _mm512_storeu_ps(oT + t * R + 16 * b, acc[b][t]);
}

// t[i] = column i of the 16 x 16 floats at m (rows `stride` floats apart).
TALLY_ALWAYS_INLINE void transpose16(const float* m, int64_t stride, __m512* t) {
  __m512 a[16], b[16];
  for (int i = 0; i < 8; ++i) {  // 128-bit lane c: rows 2i, 2i + 1 interleaved, columns 4c, 4c + 1 | 4c + 2, 4c + 3
    const __m512 x = _mm512_loadu_ps(m + 2 * i * stride), y = _mm512_loadu_ps(m + (2 * i + 1) * stride);
    a[2 * i] = _mm512_unpacklo_ps(x, y);
    a[2 * i + 1] = _mm512_unpackhi_ps(x, y);
  }
  for (int i = 0; i < 4; ++i) {  // b[4i + c], 128-bit lane k: rows 4i .. 4i + 3 of column 4k + c
    const __m512d p = _mm512_castps_pd(a[4 * i]), q = _mm512_castps_pd(a[4 * i + 2]);
    const __m512d u = _mm512_castps_pd(a[4 * i + 1]), v = _mm512_castps_pd(a[4 * i + 3]);
    b[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(p, q));
    b[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(p, q));
    b[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(u, v));
    b[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(u, v));
  }
  for (int c = 0; c < 4; ++c) {  // column 4k + c: lane k of b[c], b[4 + c], b[8 + c], b[12 + c]
    const __m512 e0 = _mm512_shuffle_f32x4(b[c], b[4 + c], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 e1 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 o0 = _mm512_shuffle_f32x4(b[c], b[4 + c], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512 o1 = _mm512_shuffle_f32x4(b[8 + c], b[12 + c], _MM_SHUFFLE(3, 1, 3, 1));
    t[c] = _mm512_shuffle_f32x4(e0, e1, _MM_SHUFFLE(2, 0, 2, 0));
    t[8 + c] = _mm512_shuffle_f32x4(e0, e1, _MM_SHUFFLE(3, 1, 3, 1));
    t[4 + c] = _mm512_shuffle_f32x4(o0, o1, _MM_SHUFFLE(2, 0, 2, 0));
    t[12 + c] = _mm512_shuffle_f32x4(o0, o1, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// One chunk [b, e) of attend_tokens with the rows in lanes: o (rows, n) the
// value sums, mx / sum the softmax of each row that sees a key of the chunk
// (seen: per token, its keys in the chunk). Scratch: st (C x R) and work
// ((C + R) x n: the values as floats, then the sums as O^T), R the rows
// rounded up to 16.
template <bool kF32>
void tokens_chunk_lanes(const float* qt, int64_t n_tokens, int64_t n_q, const int64_t* seen, const KvLayerView& kv,
                        int64_t g, int64_t b, int64_t e, float scale, float* st, float* work, float* o, float* mx,
                        float* sum) {
  const int64_t n = kv.head_dim, rows = n_tokens * n_q, R = attention_lane_rows(rows), m = e - b;
  float* vf = work;
  float* oT = work + kAttentionChunk * n;
  for (KvRuns r(kv, kv.k_layer, g, b, e); r.next();)
    dots_lanes<kF32>(qt, R, r.ptr, r.count, r.step, n, scale, st + (r.pos - b) * R);
  for (int64_t r0 = 0; r0 < R; r0 += 16) {
    alignas(64) int32_t lane_seen[16];
    for (int64_t r = 0; r < 16; ++r)
      lane_seen[r] = r0 + r < rows ? static_cast<int32_t>(seen[(r0 + r) / n_q]) : 0;
    alignas(64) float lane_mx[16], lane_sum[16];
    softmax_lanes(st + r0, R, m, lane_seen, lane_mx, lane_sum);
    for (int64_t r = 0; r < 16 && r0 + r < rows; ++r) {
      mx[r0 + r] = lane_mx[r];
      sum[r0 + r] = lane_sum[r];
    }
  }
  for (KvRuns r(kv, kv.v_layer, g, b, e); r.next();)
    for (int64_t j = 0; j < r.count; ++j)
      for (int64_t d = 0; d < n; d += 16) _mm512_storeu_ps(vf + (r.pos - b + j) * n + d, load16<kF32>(r.ptr + j * r.step, d));
  for (int64_t b0 = 0; b0 < R / 16; b0 += 3)
    for (int64_t d = 0; d < n; d += 8) {
      const float* wt = st + 16 * b0;
      float* ot = oT + d * R + 16 * b0;
      switch (std::min<int64_t>(3, R / 16 - b0)) {
        case 1: values_lanes_t<1>(wt, R, vf + d, n, m, ot); break;
        case 2: values_lanes_t<2>(wt, R, vf + d, n, m, ot); break;
        default: values_lanes_t<3>(wt, R, vf + d, n, m, ot); break;
      }
    }
  for (int64_t r0 = 0; r0 < rows; r0 += 16)
    for (int64_t d = 0; d < n; d += 16) {
      __m512 t[16];
      transpose16(oT + d * R + r0, R, t);
      for (int64_t r = 0; r < 16 && r0 + r < rows; ++r) _mm512_storeu_ps(o + (r0 + r) * n + d, t[r]);
    }
}

}  // namespace avx512

// Installed for head sizes of whole 16-float vectors (HeadFit::Vec16).
struct Avx512Ops {
  static constexpr bool kRowLanes = true;
  // Whether tokens_chunk_lanes takes this cache: f32 / f16 values, heads up to kLanesMaxHead.
  template <class Fmt>
  static bool lanes_take(const KvLayerView& kv) {
    return !Fmt::kBlocks && kv.head_dim <= avx512::kLanesMaxHead;
  }
  template <class Fmt>
  static void tokens_chunk_lanes(const float* qt, int64_t n_tokens, int64_t n_q, const int64_t* seen,
                                 const KvLayerView& kv, int64_t g, int64_t b, int64_t e, float scale, float* st,
                                 float* work, float* o, float* mx, float* sum) {
    if constexpr (!Fmt::kBlocks)
      avx512::tokens_chunk_lanes<Fmt::kF32>(qt, n_tokens, n_q, seen, kv, g, b, e, scale, st, work, o, mx, sum);
  }
  template <class Fmt>
  static void dots_block_q(const QueryBlock* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                           float scale, float* scores, int64_t stride) {
    avx512::dots_block_q<Fmt>(q, n_q, k, m, step, n, scale, scores, stride);
  }
  template <class Fmt>
  static void dots_block(const float* q, int64_t n_q, const uint8_t* k, int64_t m, uint64_t step, int64_t n,
                         float scale, float* scores, int64_t stride) {
    avx512::dots_block<Fmt>(q, n_q, k, m, step, n, scale, scores, stride);
  }
  static float exp_sum(float* x, int64_t n, float* max_out) {
    float sum = 0;
    if (avx512::exp_sum(x, n, max_out, &sum)) return sum;
    return ScalarOps::exp_sum(x, n, max_out);
  }
  template <class Fmt>
  static void weighted_sum(float* out, int64_t n_q, const float* w, int64_t stride, const KvLayerView& kv, int64_t g,
                           int64_t b, int64_t e) {
    if constexpr (Fmt::kBlocks)
      avx512::weighted_sum_q<Fmt>(out, n_q, w, stride, kv, g, b, e);
    else
      avx512::weighted_sum<Fmt>(out, n_q, w, stride, kv, g, b, e);
  }
};
}  // namespace

void install_attention_avx512(KernelTable& t) { install_attention<Avx512Ops>(t, HeadFit::Vec16); }
#else
void install_attention_avx512(KernelTable&) {}
#endif

}  // namespace tally
