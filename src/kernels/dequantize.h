#pragma once
// Scalar reference dequantizers: GGUF block formats -> float32.
// Each row function takes n values (a multiple of the type's block size, else
// tally::Error) stored in row_bytes(type, n) bytes at `src`; `src` needs no
// alignment. The per-block functions are the scalar reference that the
// matmul kernels reuse and are tested against; they do no checking.
// All functions are pure and thread-safe.
#include <cstdint>

#include "core/dtype.h"

namespace tally {

// Dispatches on `type`; throws tally::Error naming the type (name and id) if
// tally cannot dequantize it, or if n is not a multiple of its block size.
void dequantize_row(DType type, const uint8_t* src, float* dst, uint64_t n);

// The index of the first of the n values at `src` that would dequantize to
// NaN or an infinity, or -1 when every one is finite. Float types: each value
// is tested. Block types: only the f16 scales (d; m or dmin) are read, 2 to 4
// bytes a block, since a finite scale times a block's small integers is
// finite; a block with a bad scale is reported by its first value. Throws
// like dequantize_row for a type it does not know.
int64_t first_non_finite(DType type, const uint8_t* src, uint64_t n);

// One function per supported type; same contract as dequantize_row.
void dequantize_row_f32(const uint8_t* src, float* dst, uint64_t n);
void dequantize_row_f16(const uint8_t* src, float* dst, uint64_t n);
void dequantize_row_bf16(const uint8_t* src, float* dst, uint64_t n);
void dequantize_row_q8_0(const uint8_t* src, float* dst, uint64_t n);
void dequantize_row_q4_0(const uint8_t* src, float* dst, uint64_t n);
void dequantize_row_q4_1(const uint8_t* src, float* dst, uint64_t n);
void dequantize_row_q5_0(const uint8_t* src, float* dst, uint64_t n);
void dequantize_row_q5_1(const uint8_t* src, float* dst, uint64_t n);
void dequantize_row_q4_k(const uint8_t* src, float* dst, uint64_t n);
void dequantize_row_q5_k(const uint8_t* src, float* dst, uint64_t n);
void dequantize_row_q6_k(const uint8_t* src, float* dst, uint64_t n);

// One block each: 32 values for the *_0/*_1 types, 256 for the K types.
// `block` points at type_size bytes (34, 18, 20, 22, 24, 144, 176, 210).
void dequantize_block_q8_0(const uint8_t* block, float* out32);
void dequantize_block_q4_0(const uint8_t* block, float* out32);
void dequantize_block_q4_1(const uint8_t* block, float* out32);
void dequantize_block_q5_0(const uint8_t* block, float* out32);
void dequantize_block_q5_1(const uint8_t* block, float* out32);
void dequantize_block_q4_k(const uint8_t* block, float* out256);
void dequantize_block_q5_k(const uint8_t* block, float* out256);
void dequantize_block_q6_k(const uint8_t* block, float* out256);

// The 6-bit scale and min of sub-block j (0..7) from the 12 packed scale
// bytes of a Q4_K/Q5_K block.
void unpack_k_scale_min(const uint8_t* scales12, int j, uint8_t* scale, uint8_t* min);

}  // namespace tally
