#pragma once
// The matrix kernels of the row-group layout (group_layout.h) as templates
// over the weight type and the lane width: one lane per weight row, one
// broadcast activation dword per integer dot. Included only by the
// translation units compiled for the instruction set they use (gemm_avx2.cpp,
// gemm_vnni.cpp, gemm_avx512.cpp), with the dot instructions of gemm_dots.h.
// A tile is a group's rows (8 of them at 256 bits) x T tokens: each weight
// load is unpacked once for T tokens. Every
// lane runs the sequence of group_layout.h, so results are bit-identical
// across levels, tile shapes and row ranges.
#include "kernels/gemm_dots.h"
#include "kernels/group_layout.h"

namespace tally {
namespace {

inline int32_t load_dword(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The integer block sums of one group block for T tokens: q + 64 k holds
// dword k of the lanes' rows, xb[j] is token j's activation block.
// 8 rows per vector (256 bits): a group is two halves of 8 rows.
template <class D>
struct Rows256 {
  static constexpr int kRows = 8;
  using F = __m256;
  using I = __m256i;
  static F zero() { return _mm256_setzero_ps(); }
  static __m256i bcast(const int8_t* p) { return _mm256_set1_epi32(load_dword(p)); }
  template <int T>
  __attribute__((always_inline)) static void q4(const uint8_t* q, const BlockQ8* const* xb, __m256i* out) {
    static_assert(part_products(15) >= 8);  // the block's 8 products chain in one part
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i p[T];
    for (int k = 0; k < 4; ++k) {
      const __m256i w = load256(q + 64 * k);
      const __m256i lo = _mm256_and_si256(w, m4), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
      for (int j = 0; j < T; ++j) {
        p[j] = k == 0 ? D::part(lo, bcast(xb[j]->q)) : D::part_acc(p[j], lo, bcast(xb[j]->q + 4 * k));
        p[j] = D::part_acc(p[j], hi, bcast(xb[j]->q + 16 + 4 * k));
      }
    }
    for (int j = 0; j < T; ++j) out[j] = D::widen(p[j]);
  }
  // 5-bit values: q4's low 4 bits, the 5th from the high bits hb
  // (group_layout.h), two loads (4 products) per 16-bit part.
  template <int T>
  __attribute__((always_inline)) static void q5(const uint8_t* q, const uint8_t* hb, const BlockQ8* const* xb,
                                                __m256i* out) {
    static_assert(part_products(31) == 4);
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16), h = load256(hb);
    __m256i p[T];
    for (int k = 0; k < 4; ++k) {
      const __m256i w = load256(q + 64 * k), hs = _mm256_srli_epi16(h, 2 * k);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(w, m4), _mm256_and_si256(_mm256_slli_epi16(hs, 4), b4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w, 4), m4),
                                         _mm256_and_si256(_mm256_slli_epi16(hs, 3), b4));
      for (int j = 0; j < T; ++j) {
        p[j] = k % 2 == 0 ? D::part(lo, bcast(xb[j]->q + 4 * k)) : D::part_acc(p[j], lo, bcast(xb[j]->q + 4 * k));
        p[j] = D::part_acc(p[j], hi, bcast(xb[j]->q + 16 + 4 * k));
        if (k == 1) out[j] = D::widen(p[j]);
        if (k == 3) out[j] = _mm256_add_epi32(out[j], D::widen(p[j]));
      }
    }
  }
  // Values 0..255 (q + 128), whose sum less 128 x the activations' is
  // wanted (kSignedQ8 false: the tile takes the 128 off). vpdpbusd takes them
  // whole. vpmaddubsw's 16-bit pair sums would saturate on 255 x 127, so AVX2
  // multiplies the signed q itself, |q| by x with q's sign moved onto x, and
  // gives the sum with the offset already off (kSignedQ8 true): the same
  // integers.
  static constexpr bool kSignedQ8 = std::is_same_v<D, DotAvx2>;
  template <int T>
  __attribute__((always_inline)) static void q8(const uint8_t* q, const BlockQ8* const* xb, __m256i* out) {
    for (int j = 0; j < T; ++j) out[j] = _mm256_setzero_si256();
    if constexpr (kSignedQ8) {
      const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
      for (int k = 0; k < 8; ++k) {
        const __m256i s = _mm256_xor_si256(load256(q + 64 * k), flip);  // q
        const __m256i a = _mm256_abs_epi8(s);  // -128 becomes 0x80, read as unsigned 128
        for (int j = 0; j < T; ++j) out[j] = D::dot_acc(out[j], a, _mm256_sign_epi8(bcast(xb[j]->q + 4 * k), s));
      }
    } else {
      for (int k = 0; k < 8; ++k) {
        const __m256i w = load256(q + 64 * k);
        for (int j = 0; j < T; ++j) out[j] = D::dot_acc(out[j], w, bcast(xb[j]->q + 4 * k));
      }
    }
  }
  // Q6_K: 6-bit values (4 low bits as q4's, the top 2 from hb), a sum per
  // half block (two loads, 4 products, per 16-bit part), each less 32 x the
  // half's activation sum hv[j][h], times the half's scale: the exact isum.
  template <int T>
  __attribute__((always_inline)) static void q6(const uint8_t* q, const uint8_t* hb, const uint8_t* sc,
                                                const BlockQ8* const* xb, const int32_t* const* hv, __m256i* out) {
    static_assert(part_products(63) == 2);
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(0x30);
    const __m256i h[2] = {load256(hb), load256(hb + 64)};
    __m256i plo[T], phi[T], hi[T];
    for (int k = 0; k < 4; ++k) {
      const __m256i w = load256(q + 64 * k), hs = k % 2 ? _mm256_srli_epi16(h[k / 2], 4) : h[k / 2];
      const __m256i lo6 = _mm256_or_si256(_mm256_and_si256(w, m4), _mm256_and_si256(_mm256_slli_epi16(hs, 4), m2));
      const __m256i hi6 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w, 4), m4),
                                          _mm256_and_si256(_mm256_slli_epi16(hs, 2), m2));
      for (int j = 0; j < T; ++j) {
        plo[j] = k % 2 == 0 ? D::part(lo6, bcast(xb[j]->q + 4 * k)) : D::part_acc(plo[j], lo6, bcast(xb[j]->q + 4 * k));
        phi[j] = k % 2 == 0 ? D::part(hi6, bcast(xb[j]->q + 16 + 4 * k))
                            : D::part_acc(phi[j], hi6, bcast(xb[j]->q + 16 + 4 * k));
        if (k == 1) out[j] = D::widen(plo[j]), hi[j] = D::widen(phi[j]);
        if (k == 3) out[j] = _mm256_add_epi32(out[j], D::widen(plo[j])), hi[j] = _mm256_add_epi32(hi[j], D::widen(phi[j]));
      }
    }
    const __m256i s0 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc)));
    const __m256i s1 = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 16)));
    for (int j = 0; j < T; ++j)
      out[j] = _mm256_add_epi32(_mm256_mullo_epi32(s0, _mm256_sub_epi32(out[j], _mm256_set1_epi32(32 * hv[j][0]))),
                                _mm256_mullo_epi32(s1, _mm256_sub_epi32(hi[j], _mm256_set1_epi32(32 * hv[j][1]))));
  }
  static F scales(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  // acc = fma(float(isum - off), dw * dx, acc)
  static void step(F& acc, __m256i isum, int32_t off, F dw, float dx) {
    const __m256i exact = _mm256_sub_epi32(isum, _mm256_set1_epi32(off));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(exact), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), acc);
  }
  // acc = fma(mw, sx, acc): a block's min term
  static void min_step(F& acc, F mw, float sx) { acc = _mm256_fmadd_ps(mw, _mm256_set1_ps(sx), acc); }
  static F neg(F a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  // 8 unsigned bytes as floats (the K-quants' sub-block scales and mins)
  static F bytes(const uint8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static void store(float* y, F acc) { _mm256_storeu_ps(y, acc); }
};

#ifdef TALLY_TU_AVX512
// 16 rows per vector: a whole group. Two dot chains per token (even and odd
// loads), half as long as one: decode waits on them.
struct Rows512 {
  static constexpr int kRows = 16;
  static constexpr bool kSignedQ8 = false;
  using F = __m512;
  using I = __m512i;
  static F zero() { return _mm512_setzero_ps(); }
  static __m512i bcast(const int8_t* p) { return _mm512_set1_epi32(load_dword(p)); }
  template <int T>
  __attribute__((always_inline)) static void q4(const uint8_t* q, const BlockQ8* const* xb, __m512i* out) {
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512i odd[T];
    for (int j = 0; j < T; ++j) out[j] = odd[j] = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
      const __m512i w = _mm512_load_si512(q + 64 * k);
      const __m512i lo = _mm512_and_si512(w, m4), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
      for (int j = 0; j < T; ++j) {
        out[j] = _mm512_dpbusd_epi32(out[j], lo, bcast(xb[j]->q + 4 * k));
        odd[j] = _mm512_dpbusd_epi32(odd[j], hi, bcast(xb[j]->q + 16 + 4 * k));
      }
    }
    for (int j = 0; j < T; ++j) out[j] = _mm512_add_epi32(out[j], odd[j]);
  }
  template <int T>
  __attribute__((always_inline)) static void q5(const uint8_t* q, const uint8_t* hb, const BlockQ8* const* xb,
                                                __m512i* out) {
    const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16), h = _mm512_load_si512(hb);
    __m512i odd[T];
    for (int j = 0; j < T; ++j) out[j] = odd[j] = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
      const __m512i w = _mm512_load_si512(q + 64 * k), hs = _mm512_srli_epi16(h, 2 * k);
      const __m512i lo = _mm512_or_si512(_mm512_and_si512(w, m4), _mm512_and_si512(_mm512_slli_epi16(hs, 4), b4));
      const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(w, 4), m4),
                                         _mm512_and_si512(_mm512_slli_epi16(hs, 3), b4));
      for (int j = 0; j < T; ++j) {
        out[j] = _mm512_dpbusd_epi32(out[j], lo, bcast(xb[j]->q + 4 * k));
        odd[j] = _mm512_dpbusd_epi32(odd[j], hi, bcast(xb[j]->q + 16 + 4 * k));
      }
    }
    for (int j = 0; j < T; ++j) out[j] = _mm512_add_epi32(out[j], odd[j]);
  }
  template <int T>
  __attribute__((always_inline)) static void q8(const uint8_t* q, const BlockQ8* const* xb, __m512i* out) {
    __m512i odd[T];
    for (int j = 0; j < T; ++j) out[j] = odd[j] = _mm512_setzero_si512();
    for (int k = 0; k < 8; k += 2) {
      const __m512i w0 = _mm512_load_si512(q + 64 * k), w1 = _mm512_load_si512(q + 64 * k + 64);
      for (int j = 0; j < T; ++j) {
        out[j] = _mm512_dpbusd_epi32(out[j], w0, bcast(xb[j]->q + 4 * k));
        odd[j] = _mm512_dpbusd_epi32(odd[j], w1, bcast(xb[j]->q + 4 * k + 4));
      }
    }
    for (int j = 0; j < T; ++j) out[j] = _mm512_add_epi32(out[j], odd[j]);
  }
  template <int T>
  __attribute__((always_inline)) static void q6(const uint8_t* q, const uint8_t* hb, const uint8_t* sc,
                                                const BlockQ8* const* xb, const int32_t* const* hv, __m512i* out) {
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(0x30);
    const __m512i h[2] = {_mm512_load_si512(hb), _mm512_load_si512(hb + 64)};
    __m512i hi[T];
    for (int j = 0; j < T; ++j) out[j] = hi[j] = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) {
      const __m512i w = _mm512_load_si512(q + 64 * k), hs = k % 2 ? _mm512_srli_epi16(h[k / 2], 4) : h[k / 2];
      const __m512i lo6 = _mm512_or_si512(_mm512_and_si512(w, m4), _mm512_and_si512(_mm512_slli_epi16(hs, 4), m2));
      const __m512i hi6 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(w, 4), m4),
                                          _mm512_and_si512(_mm512_slli_epi16(hs, 2), m2));
      for (int j = 0; j < T; ++j) {
        out[j] = _mm512_dpbusd_epi32(out[j], lo6, bcast(xb[j]->q + 4 * k));
        hi[j] = _mm512_dpbusd_epi32(hi[j], hi6, bcast(xb[j]->q + 16 + 4 * k));
      }
    }
    const __m512i s0 = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)));
    const __m512i s1 = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sc + 16)));
    for (int j = 0; j < T; ++j)
      out[j] = _mm512_add_epi32(_mm512_mullo_epi32(s0, _mm512_sub_epi32(out[j], _mm512_set1_epi32(32 * hv[j][0]))),
                                _mm512_mullo_epi32(s1, _mm512_sub_epi32(hi[j], _mm512_set1_epi32(32 * hv[j][1]))));
  }
  static F scales(const uint8_t* p) { return _mm512_cvtph_ps(load256(p)); }
  static void step(F& acc, __m512i isum, int32_t off, F dw, float dx) {
    const __m512i exact = _mm512_sub_epi32(isum, _mm512_set1_epi32(off));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc);
  }
  static void min_step(F& acc, F mw, float sx) { acc = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx), acc); }
  static F neg(F a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN))); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F bytes(const uint8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void store(float* y, F acc) { _mm512_storeu_ps(y, acc); }
};
#endif

// L::kRows rows starting at row `lane0` of group g (a multiple of L::kRows
// within the group) x tokens t..t+T-1; only rows [r0, r1) are written.
template <DType kType, class L, int T>
__attribute__((always_inline)) inline void group_tile(const WeightMatrix& w, const ActivationPack& x, float* y,
                                                      int64_t g, int lane0, int64_t t, int64_t r0, int64_t r1) {
  constexpr GroupGeometry kGeo = group_geometry(kType);
  constexpr int kRecord = kGeo.record_bytes();
  const int64_t nb = w.cols / 32;
  const uint8_t* group = w.data + static_cast<uint64_t>(g) * group_bytes(kGeo, w.cols);
  const BlockQ8* xb0[T];
  const int32_t* halves[T];
  for (int j = 0; j < T; ++j) {
    xb0[j] = x.blocks + (t + j) * x.token_blocks;
    halves[j] = x.halves_row(t + j);
  }
  typename L::F acc[T];
  for (int j = 0; j < T; ++j) acc[j] = L::zero();
  for (int64_t b = 0; b < nb; ++b) {
    if (t == 0 && lane0 == 0) {  // the first tile of a group asks for the lines ahead (see kPrefetch):
      constexpr int kLines = kRecord / 64, kBlocks = kGeo.record_blocks;  // a record's share per block
      const char* ahead = reinterpret_cast<const char*>(group + group_record(kGeo, b) + kPrefetch);
      for (int l = b % kBlocks * kLines / kBlocks; l < (b % kBlocks + 1) * kLines / kBlocks; ++l)
        _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
    }
    const BlockQ8* xb[T];
    const int32_t* hv[T];  // the block's two half sums
    for (int j = 0; j < T; ++j) xb[j] = xb0[j] + b, hv[j] = halves[j] + 2 * b;
    typename L::I isum[T];
    const uint8_t* q = group + group_quant_offset(kGeo, b, 0, lane0);
    if constexpr (kType == DType::Q4_0 || kType == DType::Q4_1 || kType == DType::Q4_K) {
      L::template q4<T>(q, xb, isum);
    } else if constexpr (kType == DType::Q5_0 || kType == DType::Q5_1 || kType == DType::Q5_K) {
      L::template q5<T>(q, group + group_high_offset(kGeo, b, lane0), xb, isum);
    } else if constexpr (kType == DType::Q8_0) {
      L::template q8<T>(q, xb, isum);
    } else {
      L::template q6<T>(q, group + group_high_offset(kGeo, b, lane0), group + group_scale_offset(kGeo, b, lane0), xb, hv,
                        isum);
    }
    // d_w and m_w (group_layout.h)
    typename L::F dw = L::zero(), mw = L::zero();
    if constexpr (kType == DType::Q6_K) {
      dw = L::scales(group + group_d_offset(kGeo, b, lane0));
    } else if constexpr (kGeo.kquant()) {
      dw = L::mul(L::scales(group + group_d_offset(kGeo, b, lane0)), L::bytes(group + group_scale_offset(kGeo, b, lane0)));
      mw = L::mul(L::scales(group + group_dmin_offset(kGeo, b, lane0)), L::bytes(group + group_min_offset(kGeo, b, lane0)));
    } else {
      dw = L::scales(group + group_scale_offset(kGeo, b, lane0));
      if constexpr (kGeo.mins) mw = L::scales(group + group_min_offset(kGeo, b, lane0));
    }
    constexpr int kOffset = (kType == DType::Q8_0 && L::kSignedQ8) || kType == DType::Q6_K ? 0 : kGeo.offset;
    for (int j = 0; j < T; ++j) L::step(acc[j], isum[j], kOffset * (hv[j][0] + hv[j][1]), dw, xb[j]->d);
    if constexpr (kGeo.mins)
      for (int j = 0; j < T; ++j) L::min_step(acc[j], kGeo.kquant() ? L::neg(mw) : mw, xb[j]->s);
  }
  const int64_t row0 = g * kGroupRows + lane0;
  const bool whole = row0 >= r0 && row0 + L::kRows <= r1;
  for (int j = 0; j < T; ++j) {
    float* out = y + (t + j) * w.rows + row0;
    if (whole) {
      L::store(out, acc[j]);
    } else {  // a partial group at the ends of a thread's range or of the matrix
      float v[L::kRows];
      L::store(v, acc[j]);
      for (int i = 0; i < L::kRows; ++i)
        if (row0 + i >= r0 && row0 + i < r1) out[i] = v[i];
    }
  }
}

// One tile of the n (1 <= n <= N) tokens left after the full tiles: a step
// of a token and a few guesses (speculation's verification) unpacks each
// weight load once, instead of once per token of a remainder.
template <DType kType, class L, int N>
__attribute__((always_inline)) inline void last_tile(const WeightMatrix& w, const ActivationPack& x, float* y,
                                                     int64_t g, int lane0, int64_t t, int64_t n, int64_t r0,
                                                     int64_t r1) {
  if constexpr (N > 1)
    if (n < N) return last_tile<kType, L, N - 1>(w, x, y, g, lane0, t, n, r0, r1);
  group_tile<kType, L, N>(w, x, y, g, lane0, t, r0, r1);
}

template <DType kType, class L, int T>
void group_tiles(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t g0, int64_t g1, int64_t t0,
                 int64_t t1, int64_t r0, int64_t r1) {
  for (int64_t g = g0; g < g1; ++g)
    for (int lane0 = 0; lane0 < kGroupRows; lane0 += L::kRows) {
      if (g * kGroupRows + lane0 >= r1 || g * kGroupRows + lane0 + L::kRows <= r0) continue;
      int64_t t = t0;
      for (; t + T <= t1; t += T) group_tile<kType, L, T>(w, x, y, g, lane0, t, r0, r1);
      if constexpr (T > 1)
        if (t < t1) last_tile<kType, L, T - 1>(w, x, y, g, lane0, t, t1 - t, r0, r1);
    }
}

// Rows [r0, r1) of a row-group matrix: the groups that hold them, in token
// chunks small enough that their activations stay in L1 while a group's
// weights are reused for each tile of T tokens.
template <DType kType, class L, int T>
void gemm_group(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
  constexpr int64_t kTokenChunk = 16;
  const int64_t g0 = r0 / kGroupRows, g1 = (r1 + kGroupRows - 1) / kGroupRows;
  for (int64_t t0 = 0; t0 < x.n; t0 += kTokenChunk)
    group_tiles<kType, L, T>(w, x, y, g0, g1, t0, std::min(x.n, t0 + kTokenChunk), r0, r1);
}

// The row-group kernels of one lane width (T: the prefill tile's tokens;
// TQ8: Q8_0's, whose unpacking is only a load, so larger tiles gain it nothing).
template <class L, int T, int TQ8 = T>
void install_group_kernels(KernelTable& t) {
  t.set_gemm(DType::Q4_0, gemm_group<DType::Q4_0, L, T>);
  t.set_gemm(DType::Q4_1, gemm_group<DType::Q4_1, L, T>);
  t.set_gemm(DType::Q5_0, gemm_group<DType::Q5_0, L, T>);
  t.set_gemm(DType::Q5_1, gemm_group<DType::Q5_1, L, T>);
  t.set_gemm(DType::Q8_0, gemm_group<DType::Q8_0, L, TQ8>);
  t.set_gemm(DType::Q4_K, gemm_group<DType::Q4_K, L, T>);
  t.set_gemm(DType::Q5_K, gemm_group<DType::Q5_K, L, T>);
  t.set_gemm(DType::Q6_K, gemm_group<DType::Q6_K, L, T>);
}

}  // namespace
}  // namespace tally
