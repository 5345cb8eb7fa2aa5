#pragma once
// The matrix kernels of the split and K-quant layouts (split_layout.h,
// kquant_layout.h) as templates over the weight format, the lane width and the
// integer dot instruction. Included only by translation units compiled for
// the instruction set they use (gemm_avx2.cpp: -mavx2 -mfma -mf16c,
// gemm_vnni.cpp: also -mavxvnni, gemm_avx512.cpp: AVX-512 F/BW/VL/VNNI);
// internal linkage keeps the copies apart. A tile of R rows x T tokens unpacks each weight run once for T tokens
// and loads each activation run once for R rows. Per (row, token) the
// arithmetic is that of one dot product in run order, so results depend on
// neither the tile shape nor n_tokens: prefill and decode agree bit for bit,
// and so do the instruction sets.
#include "kernels/x86_intrinsics.h"  // first: see there

#include <algorithm>
#include <type_traits>
#include <cstring>

#include "kernels/activation_pack.h"
#include "kernels/activation_q8.h"
#include "kernels/kernel_table.h"
#include "kernels/kquant_layout.h"
#include "kernels/matmul.h"
#include "kernels/split_layout.h"

namespace tally {
namespace {

// Sums of 4 adjacent u8 x s8 products in 8 int32 lanes (exact for our ranges);
// dot_acc adds them to acc. Partial sums (part, part_acc, then widen to the 8
// int32 lanes): AVX2 keeps vpmaddubsw's 16-bit pair sums and widens once, so
// a caller may chain at most part_products(umax) products into one part
// (umax: the largest unsigned operand); VNNI parts are already 32-bit.
constexpr int part_products(int umax) { return 32767 / (2 * 127 * umax); }
struct DotAvx2 {
  static __m256i dot(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
  static __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_add_epi32(acc, dot(u, s)); }
  static __m256i part(__m256i u, __m256i s) { return _mm256_maddubs_epi16(u, s); }
  static __m256i part_acc(__m256i p, __m256i u, __m256i s) { return _mm256_add_epi16(p, _mm256_maddubs_epi16(u, s)); }
  static __m256i widen(__m256i p) { return _mm256_madd_epi16(p, _mm256_set1_epi16(1)); }
};
#ifdef TALLY_TU_AVXVNNI
struct DotVnni {
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s); }
  static __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
  static __m256i part(__m256i u, __m256i s) { return dot(u, s); }
  static __m256i part_acc(__m256i p, __m256i u, __m256i s) { return dot_acc(p, u, s); }
  static __m256i widen(__m256i p) { return p; }
};
#endif

// W (8, 4 or 2) f16 scales from p in lanes 0..W-1, zeros above (reads only its own).
template <int W>
inline __m256 load_half8(const uint8_t* p) {
  if constexpr (W == 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  else if constexpr (W == 4) return _mm256_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  else {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_cvtph_ps(_mm_cvtsi32_si128(v));
  }
}

// Weights stream from memory once per token: asking for the bytes 8 KiB ahead
// of the current group (~20 rows of a 576-wide matrix) keeps enough loads in
// flight for one core to read at ~30 GB/s instead of ~23 (measured on AMD
// Zen 5; 2 KiB ahead was slower than none, as it competes with the hardware
// prefetcher).
constexpr int kPrefetch = 8192;

inline __m256i load256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// An empty asm the value passes through: the compiler keeps a sum chain in
// the order written instead of reassociating it into a tree whose many live
// products spill to the stack.
inline void keep(__m256i& v) { __asm__("" : "+x"(v)); }

// The W (8, 4 or 2) high-bit bytes of a run broadcast over 32 bytes
// (split_layout.h: byte p of a quant load finds its bits in byte p % 4W).
template <int W>
inline __m256i load_high_bits(const uint8_t* hb) {
  if constexpr (W == 8) return load256(hb);
  else if constexpr (W == 4) return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hb)));
  else {
    int64_t v;
    std::memcpy(&v, hb, 8);
    return _mm256_set1_epi64x(v);
  }
}
// High bits for quant load i of a run of W: each byte's slot k (bits 2k, 2k+1)
// moved to bits 0 and 1. k = (32 i + p) / 4W is the same over each 8 bytes.
template <int W, int I>
inline __m256i high_bits_slot(__m256i h) {
  if constexpr (W == 8) return _mm256_srli_epi64(h, 2 * I);
  else if constexpr (W == 4) return _mm256_srlv_epi64(h, _mm256_setr_epi64x(4 * I, 4 * I, 4 * I + 2, 4 * I + 2));
  else return _mm256_srlv_epi64(h, _mm256_setr_epi64x(0, 2, 4, 6));
}

// Integer sums of one run of W blocks (split_layout.h) for T tokens: lane l
// holds a partial sum of block l % W (the whole block sum when W = 8).
// w: the run's quants; x[j]: token j's run (activation_pack.h).
// Lanes256 uses 32-byte loads and the dot instruction D.
template <class D>
struct Lanes256 {
  using Dot = D;
  // Load i holds dwords of values 4k.. (low nibbles, meeting x + 32 i) and
  // 16+4k.. (high nibbles, meeting the x dwords 4 W further on).
  template <int W, int T>
  __attribute__((always_inline)) static void q4(const uint8_t* w, const int8_t* const* x, __m256i* out) {
    static_assert(W <= part_products(15));
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i p[T];
    for (int i = 0; i < W / 2; ++i) {
      const __m256i q = load256(w + 32 * i);
      const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      for (int j = 0; j < T; ++j) {
        p[j] = i == 0 ? D::part(lo, load256(x[j])) : D::part_acc(p[j], lo, load256(x[j] + 32 * i));
        p[j] = D::part_acc(p[j], hi, load256(x[j] + 16 * W + 32 * i));
        keep(p[j]);
      }
    }
    for (int j = 0; j < T; ++j) out[j] = D::widen(p[j]);
  }
  // 5-bit values: the 4 low bits as q4, the 5th from the run's high bits hb.
  template <int W, int T>
  __attribute__((always_inline)) static void q5(const uint8_t* w, const uint8_t* hb, const int8_t* const* x,
                                                __m256i* out) {
    static_assert(part_products(31) == 4);  // two loads (4 products) per part
    const __m256i m4 = _mm256_set1_epi8(15), b4 = _mm256_set1_epi8(16);
    const __m256i h = load_high_bits<W>(hb);
    __m256i p[T];
    auto load = [&](auto ic) __attribute__((always_inline)) {
      constexpr int i = decltype(ic)::value;
      const __m256i q = load256(w + 32 * i), hs = high_bits_slot<W, i>(h);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_slli_epi16(hs, 4), b4));
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                         _mm256_and_si256(_mm256_slli_epi16(hs, 3), b4));
      for (int j = 0; j < T; ++j) {
        p[j] = i % 2 == 0 ? D::part(lo, load256(x[j] + 32 * i)) : D::part_acc(p[j], lo, load256(x[j] + 32 * i));
        p[j] = D::part_acc(p[j], hi, load256(x[j] + 16 * W + 32 * i));
        keep(p[j]);
        if (i % 2 == 1 || i == W / 2 - 1) out[j] = i < 2 ? D::widen(p[j]) : _mm256_add_epi32(out[j], D::widen(p[j]));
      }
    };
    load(std::integral_constant<int, 0>{});
    if constexpr (W >= 4) load(std::integral_constant<int, 1>{});
    if constexpr (W == 8) {
      load(std::integral_constant<int, 2>{});
      load(std::integral_constant<int, 3>{});
    }
  }
};

#ifdef TALLY_TU_AVX512
// 256-bit vpdpbusd in its EVEX form (AVX512-VL), for CPUs without AVX-VNNI.
struct DotVnni512 {
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
  static __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
  static __m256i part(__m256i u, __m256i s) { return dot(u, s); }
  static __m256i part_acc(__m256i p, __m256i u, __m256i s) { return dot_acc(p, u, s); }
  static __m256i widen(__m256i p) { return p; }
};

// Runs of 8 with 64-byte loads (two of Lanes256's loads at once; lanes 8..15
// fold onto 0..7 at the end, an exact integer add); the shorter runs as
// Lanes256 with the same instruction.
struct Lanes512 {
  using Dot = DotVnni512;
  using Narrow = Lanes256<DotVnni512>;
  static __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
  static __m256i fold(__m512i v) {
    // (masked forms: g++ 12 warns about the undefined source operand of the plain ones)
    return _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xFF, v, 0), _mm512_maskz_extracti64x4_epi64(0xFF, v, 1));
  }
  template <int W, int T>
  __attribute__((always_inline)) static void q4(const uint8_t* w, const int8_t* const* x, __m256i* out) {
    if constexpr (W < 8) {
      Narrow::q4<W, T>(w, x, out);
    } else {
      const __m512i m4 = _mm512_set1_epi8(15);
      __m512i acc[T];
      for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_si512();
      for (int k = 0; k < 2; ++k) {  // dwords 2k, 2k+1: values 8k.. (low nibbles) and 16+8k.. (high)
        const __m512i q = load512(w + 64 * k);
        const __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        for (int j = 0; j < T; ++j)
          acc[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[j], lo, load512(x[j] + 64 * k)), hi,
                                       load512(x[j] + 64 * (k + 2)));
      }
      for (int j = 0; j < T; ++j) out[j] = fold(acc[j]);
    }
  }
  // As Lanes256::q5, loads 2k and 2k + 1 at once: the run's high bits over
  // both halves, each shifted to its own load's slot.
  template <int W, int T>
  __attribute__((always_inline)) static void q5(const uint8_t* w, const uint8_t* hb, const int8_t* const* x,
                                                __m256i* out) {
    if constexpr (W < 8) {
      Narrow::template q5<W, T>(w, hb, x, out);
    } else {
      const __m512i m4 = _mm512_set1_epi8(15), b4 = _mm512_set1_epi8(16);
      const __m512i h = _mm512_broadcast_i64x4(load256(hb));
      __m512i acc[T];
      for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_si512();
      for (int k = 0; k < 2; ++k) {
        const __m512i q = load512(w + 64 * k);
        const __m512i hs = _mm512_srlv_epi64(h, _mm512_set_epi64(4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k + 2, 4 * k,
                                                                  4 * k, 4 * k, 4 * k));
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(q, m4), _mm512_and_si512(_mm512_slli_epi16(hs, 4), b4));
        const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4),
                                           _mm512_and_si512(_mm512_slli_epi16(hs, 3), b4));
        for (int j = 0; j < T; ++j)
          acc[j] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[j], lo, load512(x[j] + 64 * k)), hi,
                                       load512(x[j] + 128 + 64 * k));
      }
      for (int j = 0; j < T; ++j) out[j] = fold(acc[j]);
    }
  }
};
#endif

// 8 floats repeating the W (8, 4 or 2) at p: lane l gets p[l % W].
template <int W>
inline __m256 repeat_ps(const float* p) {
  if constexpr (W == 8) return _mm256_loadu_ps(p);
  else if constexpr (W == 4) return _mm256_broadcast_ps(reinterpret_cast<const __m128*>(p));
  else return _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(p)));
}
// The same for W f16 values, converted.
template <int W>
inline __m256 repeat_half(const uint8_t* p) {
  if constexpr (W == 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  int64_t v8;
  int32_t v4;
  if constexpr (W == 4) std::memcpy(&v8, p, 8);
  else std::memcpy(&v4, p, 4);
  return _mm256_cvtph_ps(W == 4 ? _mm_set1_epi64x(v8) : _mm_set1_epi32(v4));
}
// The W floats at p in lanes 0..W-1, zeros above (reads nothing past p + W).
template <int W>
inline __m256 load_first(const float* p) {
  if constexpr (W == 8) return _mm256_loadu_ps(p);
  else if constexpr (W == 4) return _mm256_zextps128_ps256(_mm_loadu_ps(p));
  else return _mm256_zextps128_ps256(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p))));
}

// Weight formats. Each walks a row's runs (for_each_run) and gives, for a run
// of W blocks starting at block b0 of a row (nb blocks), the integer sums of
// T tokens (sums) and the per-lane weight scale dw and min mw (scales); the
// tile adds (dw * dx) * sums and mw * sx per lane, and kMinScale times the
// mins to the sum before the lanes are added.

// The split layout: value = d * q + m.
template <int kBits>
struct SplitFmt {
  static constexpr int kQsBytes = 16, kQhBytes = kBits == 5 ? 4 : 0;
  static constexpr float kMinScale = 1.0f;
  template <class F>
  __attribute__((always_inline)) static void for_each_run(int64_t nb, F&& f) {
    for_each_split_run(nb, f);
  }
  template <int W>
  __attribute__((always_inline)) static void scales(const uint8_t* row, int64_t nb, int64_t b0, __m256& dw,
                                                    __m256& mw) {
    const uint8_t* d = row + nb * (kQsBytes + kQhBytes);
    dw = repeat_half<W>(d + 2 * b0);
    mw = load_half8<W>(d + 2 * nb + 2 * b0);
  }
  template <class L, int W, int T>
  __attribute__((always_inline)) static void sums(const uint8_t* row, int64_t nb, int64_t b0, const int8_t* const* x,
                                                  __m256i* out) {
    if constexpr (kBits == 4) L::template q4<W, T>(row + b0 * kQsBytes, x, out);
    else L::template q5<W, T>(row + b0 * kQsBytes, row + nb * kQsBytes + 4 * b0, x, out);
  }
};
using SplitQ4_1 = SplitFmt<4>;
using SplitQ5_1 = SplitFmt<5>;

// The K-quant layout: one run of 8 sub-blocks per super-block (nb / 8 of them).
// dw = d * sc, mw = dmin * m (exact products: 11 x 6 bits), value = dw q - mw.
template <DType kType>
struct KquantFmt {
  static constexpr float kMinScale = -1.0f;
  template <class F>
  __attribute__((always_inline)) static void for_each_run(int64_t nb, F&& f) {
    for (int64_t b0 = 0; b0 < nb; b0 += 8) f(std::integral_constant<int, 8>{}, b0);
  }
  static __m256 bytes_ps(uint64_t v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(v)))); }
  static __m256 half_ps(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<int16_t>(h)));
  }
  template <int W>
  __attribute__((always_inline)) static void scales(const uint8_t* row, int64_t nb, int64_t b0, __m256& dw,
                                                    __m256& mw) {
    static_assert(W == 8);
    const uint8_t* meta = row + kquant_planes(kType, nb / 8).meta + 2 * b0;
    uint64_t sc, mn;
    kquant_scales_mins(meta + 4, &sc, &mn);
    dw = _mm256_mul_ps(half_ps(meta), bytes_ps(sc));
    mw = _mm256_mul_ps(half_ps(meta + 2), bytes_ps(mn));
  }
  template <class L, int W, int T>
  __attribute__((always_inline)) static void sums(const uint8_t* row, int64_t nb, int64_t b0, const int8_t* const* x,
                                                  __m256i* out) {
    static_assert(W == 8);
    if constexpr (kType == DType::Q4_K) L::template q4<8, T>(row + 16 * b0, x, out);
    else L::template q5<8, T>(row + 16 * b0, row + kquant_planes(kType, nb / 8).bits + 4 * b0, x, out);
  }
};

// The sums of the lanes of 4 vectors, {sum a, sum b, sum c, sum d}, each as
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}
// The sum of the lanes of one vector, in the same order as hsum4.
inline float hsum1(__m256 a) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a, a), a);
  return _mm_cvtss_f32(_mm_add_ss(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

// What the tiles read of a matrix and of the packed activations, copied into
// locals once per call (the compiler cannot keep members of the arguments in
// registers across the stores to y).
struct TileArgs {
  const uint8_t* w;   // rows of row_bytes
  uint64_t row_bytes;
  int64_t rows, nb;   // nb: blocks per row (split_blocks)
  const int8_t* xq;   // activation pack: (n, nb * 32) quants, (n, nb8) d and s
  const float *xd, *xs;
  int64_t nb8;
  float* y;           // (n, rows)
  TileArgs(const WeightMatrix& m, const ActivationPack& x, float* out)
      : w(m.data), row_bytes(m.row_bytes), rows(m.rows), nb(split_blocks(m.cols)), xq(x.q.data()), xd(x.d.data()),
        xs(x.s.data()), nb8(x.nb8), y(out) {}
};

// R rows x T tokens (R * T is 1, 2 or 4), run by run in block order. Per (row,
// token) and run: acc += sums * (d_w * d_x), lane by lane (repeating scales
// for runs under 8 blocks), and accm += m_w * s_x over the run's blocks; then
// acc + kMinScale * accm per lane, and the lanes summed in the order of hsum4,
// whatever R, T and L are.
template <class S, class L, int R, int T>
__attribute__((always_inline)) inline void split_tile(const TileArgs& a, int64_t r, int64_t t) {
  static_assert(R * T == 1 || R * T == 2 || R * T == 4);
  const int64_t nb = a.nb;
  __m256 acc[R][T], accm[R][T];
  const uint8_t* qs[R];
  for (int i = 0; i < R; ++i) {
    qs[i] = a.w + static_cast<uint64_t>(r + i) * a.row_bytes;
    for (int j = 0; j < T; ++j) acc[i][j] = accm[i][j] = _mm256_setzero_ps();
  }
  if (t == 0)  // the first token tile of these rows asks for the rows ahead
    for (uint64_t off = 0; off < R * a.row_bytes; off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(qs[0] + kPrefetch + off), _MM_HINT_T0);
  const int8_t* xq0[T];
  const float *xd[T], *xs[T];
  for (int j = 0; j < T; ++j) {
    xq0[j] = a.xq + (t + j) * nb * 32;
    xd[j] = a.xd + (t + j) * a.nb8;
    xs[j] = a.xs + (t + j) * a.nb8;
  }
  auto run = [&](auto width, int64_t b0) __attribute__((always_inline)) {
    constexpr int W = decltype(width)::value;
    __m256 dx[T], sx[T];
    const int8_t* xq[T];
    for (int j = 0; j < T; ++j) {
      dx[j] = repeat_ps<W>(xd[j] + b0);
      sx[j] = load_first<W>(xs[j] + b0);
      xq[j] = xq0[j] + b0 * 32;
    }
    for (int i = 0; i < R; ++i) {
      __m256 dw, mw;
      S::template scales<W>(qs[i], nb, b0, dw, mw);
      __m256i sums[T];
      S::template sums<L, W, T>(qs[i], nb, b0, xq, sums);
      for (int j = 0; j < T; ++j) {
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[j]), _mm256_mul_ps(dw, dx[j]), acc[i][j]);
        accm[i][j] = _mm256_fmadd_ps(mw, sx[j], accm[i][j]);
      }
    }
  };
  S::for_each_run(nb, run);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_fmadd_ps(accm[i][j], _mm256_set1_ps(S::kMinScale), acc[i][j]);
  if constexpr (R == 4) {  // 4 rows of one token: contiguous in y
    _mm_storeu_ps(a.y + t * a.rows + r, hsum4(acc[0][0], acc[1][0], acc[2][0], acc[3][0]));
  } else if constexpr (T == 4) {
    alignas(16) float v[4];
    _mm_store_ps(v, hsum4(acc[0][0], acc[0][1], acc[0][2], acc[0][3]));
    for (int j = 0; j < 4; ++j) a.y[(t + j) * a.rows + r] = v[j];
  } else {
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < T; ++j) a.y[(t + j) * a.rows + r + i] = hsum1(acc[i][j]);
  }
}

template <class S, class L>
__attribute__((always_inline)) inline void split_rows(const WeightMatrix& w, const ActivationPack& x, float* y,
                                                      int64_t r0, int64_t r1) {
  constexpr int64_t kTokenChunk = 16;  // keeps the chunk's packed activations in L1
  constexpr int kRows = 4;
  const TileArgs a(w, x, y);
  if (x.n == 1) {  // decode: one activation row feeds 4 weight rows
    int64_t r = r0;
    for (; r + kRows <= r1; r += kRows) split_tile<S, L, kRows, 1>(a, r, 0);
    for (; r < r1; ++r) split_tile<S, L, 1, 1>(a, r, 0);
    return;
  }
  for (int64_t t0 = 0; t0 < x.n; t0 += kTokenChunk) {  // prefill: one unpacked weight run feeds 4 tokens
    const int64_t t1 = std::min(x.n, t0 + kTokenChunk);
    for (int64_t r = r0; r < r1; ++r) {
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4) split_tile<S, L, 1, 4>(a, r, t);
      for (; t + 2 <= t1; t += 2) split_tile<S, L, 1, 2>(a, r, t);
      if (t < t1) split_tile<S, L, 1, 1>(a, r, t);
    }
  }
}

// The kernels of the split and K-quant layouts for one lane width and dot
// instruction (L: Lanes256<D> or Lanes512) into a kernel table.
template <class S, class L>
void gemm_of(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
  split_rows<S, L>(w, x, y, r0, r1);
}
template <class L>
void install_split_kernels(KernelTable& t) {
  t.set_gemm(DType::Q4_1, gemm_of<SplitQ4_1, L>);
  t.set_gemm(DType::Q5_1, gemm_of<SplitQ5_1, L>);
  t.set_gemm(DType::Q4_K, gemm_of<KquantFmt<DType::Q4_K>, L>);
  t.set_gemm(DType::Q5_K, gemm_of<KquantFmt<DType::Q5_K>, L>);
}

}  // namespace
}  // namespace tally
