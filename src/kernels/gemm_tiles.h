#pragma once
// The split-layout matrix kernels (split_layout.h) as templates over the
// weight format, the lane width and the integer dot instruction. Included only
// by translation units compiled for the instruction set they use
// (gemm_avx2.cpp: -mavx2 -mfma -mf16c, gemm_vnni.cpp: also -mavxvnni,
// gemm_avx512.cpp: AVX-512 F/BW/VL/VNNI); internal linkage keeps the copies
// apart. A tile of R rows x T tokens unpacks each weight run once for T tokens
// and loads each activation run once for R rows. Per (row, token) the
// arithmetic is that of one dot product in run order, so results depend on
// neither the tile shape nor n_tokens: prefill and decode agree bit for bit,
// and so do the instruction sets.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <cstring>

#include "kernels/activation_pack.h"
#include "kernels/activation_q8.h"
#include "kernels/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/split_layout.h"

namespace tally {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sums of 4 adjacent u8 x s8 products in 8 int32 lanes (exact for our ranges);
// dot_acc adds them to acc.
struct DotAvx2 {
  static __m256i dot(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
  static __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_add_epi32(acc, dot(u, s)); }
};
#ifdef __AVXVNNI__
struct DotVnni {
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s); }
  static __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
};
#endif

// 8 f16 scales from p; a tail group (count < 8, even) reads only its own and
// pads with 0 (a masked load of count / 2 dwords: no store to forward from).
inline __m256 load_half8(const uint8_t* p, int64_t count) {
  if (count == 8) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m128i mask = _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(count / 2)), _mm_setr_epi32(0, 1, 2, 3));
  return _mm256_cvtph_ps(_mm_maskload_epi32(reinterpret_cast<const int*>(p), mask));
}

// Weights stream from memory once per token: asking for the bytes 8 KiB ahead
// of the current group (~20 rows of a 576-wide matrix) keeps enough loads in
// flight for one core to read at ~30 GB/s instead of ~23 (measured on AMD
// Zen 5; 2 KiB ahead was slower than none, as it competes with the hardware
// prefetcher).
constexpr int kPrefetch = 8192;

inline __m256i load256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

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
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int j = 0; j < T; ++j) out[j] = _mm256_setzero_si256();
    for (int i = 0; i < W / 2; ++i) {
      const __m256i q = load256(w + 32 * i);
      const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
      for (int j = 0; j < T; ++j)
        out[j] = D::dot_acc(D::dot_acc(out[j], lo, load256(x[j] + 32 * i)), hi, load256(x[j] + 16 * W + 32 * i));
    }
  }
  // Signed: |w| is the unsigned operand and the sign moves to x.
  template <int W, int T>
  __attribute__((always_inline)) static void q8(const uint8_t* w, const int8_t* const* x, __m256i* out) {
    for (int j = 0; j < T; ++j) out[j] = _mm256_setzero_si256();
    for (int i = 0; i < W; ++i) {
      const __m256i q = load256(w + 32 * i);
      const __m256i qa = _mm256_sign_epi8(q, q);
      for (int j = 0; j < T; ++j) out[j] = D::dot_acc(out[j], qa, _mm256_sign_epi8(load256(x[j] + 32 * i), q));
    }
  }
};

#ifdef __AVX512VNNI__
// 256-bit vpdpbusd in its EVEX form (AVX512-VL), for CPUs without AVX-VNNI.
struct DotVnni512 {
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
  static __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
};

// Runs of 8 with 64-byte loads (two dwords of the 8 blocks at once; lanes
// 8..15 fold onto 0..7 at the end); the shorter runs as Lanes256.
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
  template <int W, int T>
  __attribute__((always_inline)) static void q8(const uint8_t* w, const int8_t* const* x, __m256i* out) {
    if constexpr (W < 8) {
      Narrow::q8<W, T>(w, x, out);
    } else {
      __m512i acc[T];
      for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) {
        const __m512i q = load512(w + 64 * k);
        const __m512i qa = _mm512_abs_epi8(q);  // -128 becomes 0x80, read as unsigned 128
        const __mmask64 neg = _mm512_movepi8_mask(q);
        for (int j = 0; j < T; ++j) {
          const __m512i xv = load512(x[j] + 64 * k);
          acc[j] = _mm512_dpbusd_epi32(acc[j], qa, _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv));
        }
      }
      for (int j = 0; j < T; ++j) out[j] = fold(acc[j]);
    }
  }
};
#endif

// Weight formats of the split layout. value = d * q + m with
// m = kMinScale * (kMinIsD ? d : the stored m).
template <bool kQ8, bool kMinStored, int kMinScaleX>
struct SplitFmt {
  static constexpr int kQsBytes = kQ8 ? 32 : 16;
  static constexpr bool kMin = !kQ8, kMinIsD = !kMinStored;
  static constexpr float kMinScale = static_cast<float>(kMinScaleX);
  template <class L, int W, int T>
  __attribute__((always_inline)) static void sums(const uint8_t* qs, int64_t b0, const ActivationPack& x, int64_t t,
                                                  __m256i* out) {
    const int8_t* xq[T];
    for (int j = 0; j < T; ++j) xq[j] = x.q_at(t + j, b0);
    if constexpr (kQ8) L::template q8<W, T>(qs + b0 * kQsBytes, xq, out);
    else L::template q4<W, T>(qs + b0 * kQsBytes, xq, out);
  }
};
using SplitQ4_1 = SplitFmt<false, true, 1>;
using SplitQ4_0 = SplitFmt<false, false, -8>;  // (q - 8) d = q d + (-8) d: the min term reuses d
using SplitQ8_0 = SplitFmt<true, false, 0>;

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
  return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(W), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

// R rows x T tokens, run by run in block order. Per (row, token) and run:
// acc += sums * (d_w * d_x), lane by lane (repeating scales for runs under 8
// blocks), and accm += m_w * s_x over the run's blocks, whatever R, T and L are.
template <class S, class L, int R, int T>
__attribute__((always_inline)) inline void split_tile(const WeightMatrix& w, int64_t r, const ActivationPack& x,
                                                      int64_t t, float* y) {
  const int64_t nb = split_blocks(w.cols);
  __m256 acc[R][T], accm[R][T];
  const uint8_t* qs[R];
  for (int i = 0; i < R; ++i) {
    qs[i] = w.row(r + i);
    for (int j = 0; j < T; ++j) acc[i][j] = accm[i][j] = _mm256_setzero_ps();
  }
  if (t == 0)  // the first token tile of these rows asks for the rows ahead
    for (uint64_t off = 0; off < R * w.row_bytes; off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(qs[0] + kPrefetch + off), _MM_HINT_T0);
  auto run = [&](auto width, int64_t b0) __attribute__((always_inline)) {
    constexpr int W = decltype(width)::value;
    __m256 dx[T], sx[T];
    for (int j = 0; j < T; ++j) {
      dx[j] = repeat_ps<W>(x.d_row(t + j) + b0);
      sx[j] = W == 8 ? _mm256_loadu_ps(x.s_row(t + j) + b0) : load_first<W>(x.s_row(t + j) + b0);
    }
    for (int i = 0; i < R; ++i) {
      const uint8_t* dw_ptr = qs[i] + nb * S::kQsBytes;
      const __m256 dw = repeat_half<W>(dw_ptr + 2 * b0);
      __m256i sums[T];
      S::template sums<L, W, T>(qs[i], b0, x, t, sums);
      __m256 mw = W == 8 ? dw : load_half8(dw_ptr + 2 * b0, W);
      if constexpr (S::kMin && !S::kMinIsD) mw = load_half8(dw_ptr + 2 * nb + 2 * b0, W);
      for (int j = 0; j < T; ++j) {
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[j]), _mm256_mul_ps(dw, dx[j]), acc[i][j]);
        if constexpr (S::kMin) accm[i][j] = _mm256_fmadd_ps(mw, sx[j], accm[i][j]);
      }
    }
  };
  for_each_split_run(nb, run);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) {
      float v = hsum(acc[i][j]);
      if constexpr (S::kMin) v += S::kMinScale * hsum(accm[i][j]);
      y[(t + j) * w.rows + r + i] = v;
    }
}

template <class S, class L>
__attribute__((always_inline)) inline void split_rows(const WeightMatrix& w, const ActivationPack& x, float* y,
                                                      int64_t r0, int64_t r1) {
  constexpr int64_t kTokenChunk = 16;  // keeps the chunk's packed activations in L1
  constexpr int kRows = 4;
  if (x.n == 1) {  // decode: one activation row feeds 4 weight rows
    int64_t r = r0;
    for (; r + kRows <= r1; r += kRows) split_tile<S, L, kRows, 1>(w, r, x, 0, y);
    for (; r < r1; ++r) split_tile<S, L, 1, 1>(w, r, x, 0, y);
    return;
  }
  for (int64_t t0 = 0; t0 < x.n; t0 += kTokenChunk) {  // prefill: one unpacked weight run feeds 4 tokens
    const int64_t t1 = std::min(x.n, t0 + kTokenChunk);
    for (int64_t r = r0; r < r1; ++r) {
      int64_t t = t0;
      for (; t + 4 <= t1; t += 4) split_tile<S, L, 1, 4>(w, r, x, t, y);
      for (; t + 2 <= t1; t += 2) split_tile<S, L, 1, 2>(w, r, x, t, y);
      if (t < t1) split_tile<S, L, 1, 1>(w, r, x, t, y);
    }
  }
}

// The split kernels of one lane width and dot instruction (L: Lanes256<D> or
// Lanes512) into a kernel table.
template <class L>
void install_split_kernels(KernelTable& t) {
  t.set_gemm(DType::Q4_0, [](const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
    split_rows<SplitQ4_0, L>(w, x, y, r0, r1);
  });
  t.set_gemm(DType::Q4_1, [](const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
    split_rows<SplitQ4_1, L>(w, x, y, r0, r1);
  });
  t.set_gemm(DType::Q8_0, [](const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
    split_rows<SplitQ8_0, L>(w, x, y, r0, r1);
  });
}

}  // namespace
}  // namespace tally
