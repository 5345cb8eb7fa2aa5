#pragma once
// The tiled kernels of gemm.h as templates over the block format and the
// integer dot instruction. Included only by translation units compiled for
// the instruction set they use (gemm_avx2.cpp: -mavx2 -mfma -mf16c,
// gemm_vnni.cpp: also -mavxvnni); internal linkage keeps the copies apart.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/activation_q8.h"
#include "kernels/matmul.h"

namespace tally {
namespace {

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The 32 nibbles of 16 bytes: low nibbles are values 0..15, high are 16..31.
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// Sums of 4 adjacent u8 x s8 products in 8 int32 lanes (exact for our ranges).
struct DotAvx2 {
  static __m256i dot(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
};
#ifdef __AVXVNNI__
struct DotVnni {
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s); }
};
#endif

// Block formats. value = d * q + m (kMin) or d * q with signed q (kSigned).
struct FmtQ4_1 {
  static constexpr int kBytes = 20;
  static constexpr bool kSigned = false, kMin = true;
  static __m256i quants(const uint8_t* b) { return unpack_nibbles(b + 4); }
  static float d(const uint8_t* b) { return f16(b); }
  static float m(const uint8_t* b) { return f16(b + 2); }
};
struct FmtQ4_0 {  // (q - 8) * d = q * d + (-8 d): unsigned quants with a min
  static constexpr int kBytes = 18;
  static constexpr bool kSigned = false, kMin = true;
  static __m256i quants(const uint8_t* b) { return unpack_nibbles(b + 2); }
  static float d(const uint8_t* b) { return f16(b); }
  static float m(const uint8_t* b) { return -8.0f * f16(b); }
};
struct FmtQ8_0 {
  static constexpr int kBytes = 34;
  static constexpr bool kSigned = true, kMin = false;
  static __m256i quants(const uint8_t* b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
  }
  static float d(const uint8_t* b) { return f16(b); }
  static float m(const uint8_t*) { return 0; }
};

// One R x T tile: rows [r, r+R) of w, tokens [t, t+T) of x (nb blocks each).
template <class F, class D, int R, int T>
__attribute__((always_inline)) inline void tile(const WeightMatrix& w, int64_t r, const BlockQ8* x, int64_t t,
                                                int64_t nb, float* y) {
  __m256 acc[R][T];
  float accm[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps(), accm[i][j] = 0;
  const uint8_t* rows[R];
  for (int i = 0; i < R; ++i) rows[i] = w.row(r + i);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i q[R];
    float d[R], m[R];
    for (int i = 0; i < R; ++i) {
      const uint8_t* blk = rows[i] + b * F::kBytes;
      q[i] = F::quants(blk);
      d[i] = F::d(blk);
      m[i] = F::m(blk);
    }
    __m256i qa[R];  // signed formats: |q| as the unsigned operand, the sign moves to x
    if constexpr (F::kSigned)
      for (int i = 0; i < R; ++i) qa[i] = _mm256_sign_epi8(q[i], q[i]);
    for (int j = 0; j < T; ++j) {
      const BlockQ8& xb = x[(t + j) * nb + b];
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
      for (int i = 0; i < R; ++i) {
        const __m256i p = F::kSigned ? D::dot(qa[i], _mm256_sign_epi8(xq, q[i])) : D::dot(q[i], xq);
        acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(d[i] * xb.d), _mm256_cvtepi32_ps(p), acc[i][j]);
        if constexpr (F::kMin) accm[i][j] += m[i] * xb.s;
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) y[(t + j) * w.rows + r + i] = hsum(acc[i][j]) + accm[i][j];
}

// Tokens in chunks that keep their activations in L1 while the row tiles sweep them.
template <class F, class D>
__attribute__((always_inline)) inline void gemm_rows(const WeightMatrix& w, const BlockQ8* x, int64_t n, float* y,
                                                     int64_t r0, int64_t r1) {
  constexpr int64_t kTokenChunk = 32;
  const int64_t nb = w.cols / 32;
  for (int64_t t0 = 0; t0 < n; t0 += kTokenChunk) {
    const int64_t t1 = std::min(n, t0 + kTokenChunk);
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
      int64_t t = t0;
      for (; t + 2 <= t1; t += 2) tile<F, D, 4, 2>(w, r, x, t, nb, y);
      if (t < t1) tile<F, D, 4, 1>(w, r, x, t, nb, y);
    }
    for (; r < r1; ++r) {
      int64_t t = t0;
      for (; t + 2 <= t1; t += 2) tile<F, D, 1, 2>(w, r, x, t, nb, y);
      if (t < t1) tile<F, D, 1, 1>(w, r, x, t, nb, y);
    }
  }
}

}  // namespace
}  // namespace tally
