// AVX2 variants of the Q8-activation kernels. Same block math as the scalar
// reference in vec_dot.cpp / activation_q8.cpp; only the float summation
// order differs.
#include <cstring>

#include "core/half.h"
#include "kernels/activation_q8.h"
#include "kernels/simd_avx2.h"
#include "kernels/vec_dot.h"

namespace tally {

#if TALLY_HAVE_X86
namespace {

TALLY_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum of products of 32 signed int8 pairs, as 8 int32 lanes converted to float.
TALLY_AVX2 inline __m256 dot_i8(__m256i a, __m256i b) {
  const __m256i abs_a = _mm256_sign_epi8(a, a);
  const __m256i sb = _mm256_sign_epi8(b, a);
  const __m256i p16 = _mm256_maddubs_epi16(abs_a, sb);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// Unsigned 4-bit weights (0..15) times signed int8.
TALLY_AVX2 inline __m256 dot_u4_i8(__m256i u, __m256i b) {
  const __m256i p16 = _mm256_maddubs_epi16(u, b);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// The 32 nibbles of 16 bytes: low nibbles are values 0..15, high are 16..31.
TALLY_AVX2 inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(15);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// F16C conversion: the scalar f16_to_f32 costs more than the block's dot product.
TALLY_AVX2 inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

}  // namespace

TALLY_AVX2 float vec_dot_q8_0_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = w + b * 34;
    const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(blk) * x[b].d), dot_i8(qw, qx), acc);
  }
  return hsum(acc);
}

TALLY_AVX2 float vec_dot_q4_0_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = w + b * 18;
    const __m256i qw = _mm256_sub_epi8(unpack_nibbles(blk + 2), eight);
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(blk) * x[b].d), dot_i8(qw, qx), acc);
  }
  return hsum(acc);
}

TALLY_AVX2 float vec_dot_q4_1_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  float acc_min = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t* blk = w + b * 20;
    const __m256i qw = unpack_nibbles(blk + 4);
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(blk) * x[b].d), dot_u4_i8(qw, qx), acc);
    acc_min += f16(blk + 2) * x[b].s;
  }
  return hsum(acc) + acc_min;
}

TALLY_AVX2 void quantize_row_q8_avx2(const float* x, BlockQ8* out, int64_t n) {
  const __m256 sign_mask = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(xb + 8 * k);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_mask, v[k]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float d = _mm_cvtss_f32(m) / 127.0f;
    const float id = d >= 0x1p-126f ? 1.0f / d : 0.0f;  // a subnormal d has no finite 1/d: the block becomes 0
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q32[4];
    for (int k = 0; k < 4; ++k)
      q32[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    // Pack 32 int32 -> 32 int8; packs interleave 128-bit lanes, the permute restores order.
    const __m256i p01 = _mm256_packs_epi32(q32[0], q32[1]);
    const __m256i p23 = _mm256_packs_epi32(q32[2], q32[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), p);
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q32[0], q32[1]), _mm256_add_epi32(q32[2], q32[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    out[b].d = d;
    out[b].s = d * static_cast<float>(_mm_cvtsi128_si32(s4));
  }
}

#else
float vec_dot_q8_0_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) { return vec_dot_q8_0_q8_scalar(w, x, n); }
float vec_dot_q4_0_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) { return vec_dot_q4_0_q8_scalar(w, x, n); }
float vec_dot_q4_1_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) { return vec_dot_q4_1_q8_scalar(w, x, n); }
void quantize_row_q8_avx2(const float* x, BlockQ8* out, int64_t n) { quantize_row_q8_scalar(x, out, n); }
#endif

}  // namespace tally
