#pragma once
// The matrix kernels of the row-group layout (group_layout.h) as templates
// over the lane width: one lane per weight row, one broadcast activation
// dword per integer dot. Included only by the translation units compiled for
// the instruction set they use (gemm_avx2.cpp, gemm_vnni.cpp, gemm_avx512.cpp),
// like gemm_tiles.h, whose dot instructions (DotAvx2, DotVnni, DotVnni512)
// they share. A tile is a group's rows (or 8 of them at 256 bits) x T tokens:
// each weight load is unpacked once for T tokens. Every lane runs the
// sequence of group_layout.h, so results are bit-identical across levels,
// tile shapes and row ranges.
#include "kernels/gemm_tiles.h"
#include "kernels/group_layout.h"

namespace tally {
namespace {

inline int32_t load_dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// 8 rows per vector (256 bits): a group is two halves of 8 rows.
template <class D>
struct Rows256 {
  static constexpr int kRows = 8;
  using F = __m256;
  using I = __m256i;
  static F zero() { return _mm256_setzero_ps(); }
  // Integer sums of one Q4_0 block for T tokens: q + 64 k holds dword k of
  // the rows (group_layout.h), xb[j] token j's block.
  template <int T>
  __attribute__((always_inline)) static void q4(const uint8_t* q, const BlockQ8* const* xb, __m256i* out) {
    static_assert(part_products(15) >= 8);  // the block's 8 products chain in one part
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i p[T];
    for (int k = 0; k < 4; ++k) {
      const __m256i w = load256(q + 64 * k);
      const __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
      for (int j = 0; j < T; ++j) {
        const __m256i xl = _mm256_set1_epi32(load_dword(xb[j]->q + 4 * k));
        const __m256i xh = _mm256_set1_epi32(load_dword(xb[j]->q + 16 + 4 * k));
        p[j] = k == 0 ? D::part(lo, xl) : D::part_acc(p[j], lo, xl);
        p[j] = D::part_acc(p[j], hi, xh);
      }
    }
    for (int j = 0; j < T; ++j) out[j] = D::widen(p[j]);
  }
  static F scales(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  // acc = fma(float(isum), dw * dx, acc), accm = fma(dw, sx, accm)
  static void step(F& acc, F& accm, __m256i isum, F dw, const BlockQ8& x) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_set1_ps(x.d)), acc);
    accm = _mm256_fmadd_ps(dw, _mm256_set1_ps(x.s), accm);
  }
  static void store(float* y, F acc, F accm, float min_scale) {
    _mm256_storeu_ps(y, _mm256_fmadd_ps(accm, _mm256_set1_ps(min_scale), acc));
  }
};

#ifdef TALLY_TU_AVX512
// 16 rows per vector: a whole group.
struct Rows512 {
  static constexpr int kRows = 16;
  using F = __m512;
  using I = __m512i;
  static F zero() { return _mm512_setzero_ps(); }
  template <int T>
  __attribute__((always_inline)) static void q4(const uint8_t* q, const BlockQ8* const* xb, __m512i* out) {
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512i hi_sum[T];  // a second chain: two dependent dot chains of 4, not one of 8 (decode waits on them)
    for (int j = 0; j < T; ++j) out[j] = hi_sum[j] = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
      const __m512i w = _mm512_loadu_si512(q + 64 * k);
      const __m512i lo = _mm512_and_si512(w, m4), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
      for (int j = 0; j < T; ++j) {
        out[j] = _mm512_dpbusd_epi32(out[j], lo, _mm512_set1_epi32(load_dword(xb[j]->q + 4 * k)));
        hi_sum[j] = _mm512_dpbusd_epi32(hi_sum[j], hi, _mm512_set1_epi32(load_dword(xb[j]->q + 16 + 4 * k)));
      }
    }
    for (int j = 0; j < T; ++j) out[j] = _mm512_add_epi32(out[j], hi_sum[j]);
  }
  static F scales(const uint8_t* p) { return _mm512_cvtph_ps(load256(p)); }
  static void step(F& acc, F& accm, __m512i isum, F dw, const BlockQ8& x) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(x.d)), acc);
    accm = _mm512_fmadd_ps(dw, _mm512_set1_ps(x.s), accm);
  }
  static void store(float* y, F acc, F accm, float min_scale) {
    _mm512_storeu_ps(y, _mm512_fmadd_ps(accm, _mm512_set1_ps(min_scale), acc));
  }
};
#endif

// L::kRows rows starting at row `lane0` of group g (a multiple of L::kRows
// within the group) x tokens t..t+T-1; only rows [r0, r1) are written.
template <class L, int T>
__attribute__((always_inline)) inline void group_tile(const WeightMatrix& w, const ActivationPack& x, float* y,
                                                      int64_t g, int lane0, int64_t t, int64_t r0, int64_t r1) {
  using I = typename L::I;
  const int64_t nb = w.cols / 32;
  const uint8_t* group = w.data + static_cast<uint64_t>(g) * group_bytes(w.cols);
  const BlockQ8* xb0[T];
  for (int j = 0; j < T; ++j) xb0[j] = x.blocks + (t + j) * x.token_blocks;
  typename L::F acc[T], accm[T];
  for (int j = 0; j < T; ++j) acc[j] = accm[j] = L::zero();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* q = group + group_quant_offset(b, 0, lane0);
    const uint8_t* scales = group + group_scale_offset(b, lane0);
    if (t == 0 && lane0 == 0) {  // the first tile of a group asks for the lines ahead (see kPrefetch): 5 + 4 per record
      const char* ahead = reinterpret_cast<const char*>(group + b / 2 * kGroupRecordBytes + kPrefetch);
      for (int l = b % 2 == 0 ? 0 : 5; l < (b % 2 == 0 ? 5 : 9); ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
    }
    const BlockQ8* xb[T];
    for (int j = 0; j < T; ++j) xb[j] = xb0[j] + b;
    I isum[T];
    L::template q4<T>(q, xb, isum);
    const typename L::F dw = L::scales(scales);
    for (int j = 0; j < T; ++j) L::step(acc[j], accm[j], isum[j], dw, *xb[j]);
  }
  const int64_t row0 = g * kGroupRows + lane0;
  const bool whole = row0 >= r0 && row0 + L::kRows <= r1;
  for (int j = 0; j < T; ++j) {
    float* out = y + (t + j) * w.rows + row0;
    if (whole) {
      L::store(out, acc[j], accm[j], -8.0f);
    } else {  // a partial group at the ends of a thread's range or of the matrix
      float v[L::kRows];
      L::store(v, acc[j], accm[j], -8.0f);
      for (int i = 0; i < L::kRows; ++i)
        if (row0 + i >= r0 && row0 + i < r1) out[i] = v[i];
    }
  }
}

template <class L, int T>
void group_tiles(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t g0, int64_t g1, int64_t t0,
                 int64_t t1, int64_t r0, int64_t r1) {
  for (int64_t g = g0; g < g1; ++g)
    for (int lane0 = 0; lane0 < kGroupRows; lane0 += L::kRows) {
      if (g * kGroupRows + lane0 >= r1 || g * kGroupRows + lane0 + L::kRows <= r0) continue;
      int64_t t = t0;
      for (; t + T <= t1; t += T) group_tile<L, T>(w, x, y, g, lane0, t, r0, r1);
      for (; t < t1; ++t) group_tile<L, 1>(w, x, y, g, lane0, t, r0, r1);
    }
}

// Rows [r0, r1) of a row-group matrix: the groups that hold them, token
// chunks small enough that their activations stay in L1 while a group's
// weights are reused for each tile of T tokens.
template <class L, int T>
void gemm_group(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
  constexpr int64_t kTokenChunk = 16;
  const int64_t g0 = r0 / kGroupRows, g1 = (r1 + kGroupRows - 1) / kGroupRows;
  for (int64_t t0 = 0; t0 < x.n; t0 += kTokenChunk)
    group_tiles<L, T>(w, x, y, g0, g1, t0, std::min(x.n, t0 + kTokenChunk), r0, r1);
}

}  // namespace
}  // namespace tally
