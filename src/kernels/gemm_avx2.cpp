// AVX2 instances of the tiled kernels (this file is compiled with -mavx2
// -mfma -mf16c and only called after the CPU check). The per-dot AVX2 kernels
// of vec_dot.h are the 1 x 1 tile, so every SIMD path shares one block formula.
#include "kernels/gemm.h"
#include "kernels/split_layout.h"
#include "kernels/vec_dot.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/gemm_tiles.h"
#endif

namespace tally {

#if defined(__x86_64__) || defined(__i386__)
namespace {
template <class F>
float dot_avx2(const uint8_t* wrow, const BlockQ8* x, int64_t n) {
  WeightMatrix w;
  w.rows = 1;
  w.cols = n;
  w.data = wrow;
  float out;
  tile<F, DotAvx2, 1, 1>(w, 0, x, 0, n / 32, &out);
  return out;
}
}  // namespace

GemmFn gemm_avx2_fn(DType type) { return gemm_for<DotAvx2>(type); }
SplitGemmFn split_gemm_avx2_fn(DType type) { return split_gemm_for<Lanes256<DotAvx2>>(type); }
float vec_dot_q8_0_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) { return dot_avx2<FmtQ8_0>(w, x, n); }
float vec_dot_q4_0_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) { return dot_avx2<FmtQ4_0>(w, x, n); }
float vec_dot_q4_1_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) { return dot_avx2<FmtQ4_1>(w, x, n); }
#else
GemmFn gemm_avx2_fn(DType) { return nullptr; }
SplitGemmFn split_gemm_avx2_fn(DType) { return nullptr; }
float vec_dot_q8_0_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) { return vec_dot_q8_0_q8_scalar(w, x, n); }
float vec_dot_q4_0_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) { return vec_dot_q4_0_q8_scalar(w, x, n); }
float vec_dot_q4_1_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n) { return vec_dot_q4_1_q8_scalar(w, x, n); }
#endif

}  // namespace tally
