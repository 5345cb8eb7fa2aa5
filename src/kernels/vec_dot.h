#pragma once
// Dot product of one quantized weight row with one Q8-quantized activation
// row, dequantizing the weights block by block inside the kernel (weights are
// never expanded). n values, n a multiple of the weight type's block size.
// The *_scalar functions are the reference the SIMD variants are tested against.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/activation_q8.h"

namespace tally {

using VecDotFn = float (*)(const uint8_t* w, const BlockQ8* x, int64_t n);

// The kernel for `type` at the current SIMD level; throws if unsupported.
VecDotFn vec_dot_fn(DType type);
VecDotFn vec_dot_fn_scalar(DType type);

float vec_dot_q4_0_q8_scalar(const uint8_t* w, const BlockQ8* x, int64_t n);
float vec_dot_q4_1_q8_scalar(const uint8_t* w, const BlockQ8* x, int64_t n);
float vec_dot_q5_0_q8_scalar(const uint8_t* w, const BlockQ8* x, int64_t n);
float vec_dot_q5_1_q8_scalar(const uint8_t* w, const BlockQ8* x, int64_t n);
float vec_dot_q8_0_q8_scalar(const uint8_t* w, const BlockQ8* x, int64_t n);

float vec_dot_q4_0_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n);
float vec_dot_q4_1_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n);
float vec_dot_q8_0_q8_avx2(const uint8_t* w, const BlockQ8* x, int64_t n);

}  // namespace tally
