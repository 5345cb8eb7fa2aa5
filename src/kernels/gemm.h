#pragma once
// Tiled products of quantized weights with Q8 activations for the formats that
// carry real models (Q4_0, Q4_1, Q8_0). A tile of R rows x T tokens unpacks each
// weight block once for T tokens and loads each activation block once for R
// rows. Per (row, token) the arithmetic is exactly that of one dot product in
// block order, so results do not depend on the tile shape or on n_tokens:
// prefill and decode agree bit for bit, as do the AVX2 and AVX-VNNI variants.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/activation_q8.h"
#include "kernels/matmul.h"

namespace tally {

// y (n_tokens, w.rows) for rows [r0, r1); x is (n_tokens, w.cols / 32) blocks.
using GemmFn = void (*)(const WeightMatrix& w, const BlockQ8* x, int64_t n_tokens, float* y, int64_t r0, int64_t r1);

// The tiled kernel for `type` at the current SIMD level, or nullptr (then the
// per-dot path of matmul serves it).
GemmFn gemm_fn(DType type);
// The variants behind gemm_fn, for tests (x86 only; call after the CPU check).
GemmFn gemm_avx2_fn(DType type);
GemmFn gemm_vnni_fn(DType type);
GemmFn gemm_avx512_fn(DType type);

}  // namespace tally
