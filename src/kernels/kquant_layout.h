#pragma once
// The K-quant row layout: the bytes of a GGUF row of Q4_K/Q5_K
// super-blocks (256 values each), regrouped at load so that the SIMD kernels
// of the split layout (split_layout.h) read them: each super-block is one run
// of 8 blocks of 32 values (its sub-blocks), whose integer sums land one
// sub-block per lane; the sub-block scales are applied once per sub-block.
//   nsb = cols / 256 super-blocks; sub-block l of super-block s is block
//   8s + l of the split order, and the 8-bit activations of the same 32
//   values are block 8s + l of the activation pack (its runs are all of 8).
//   Q4_K: row = quants (nsb x 128) | meta (nsb x 16)
//   Q5_K: row = quants (nsb x 128) | high bits (nsb x 32) | meta (nsb x 16)
//   quants: the low 4 bits of each sub-block as a Q4 block of the split
//     layout (value v in the low nibble of byte v for v < 16, in the high
//     nibble of byte v - 16 otherwise), dword k of the 8 sub-blocks side by side.
//   high bits (Q5_K): the 5th bits as the split layout's Q5 high bits of a
//     run of 8 (32 bytes).
//   meta (Q4_K, Q5_K): d (f16), dmin (f16), the 12 packed 6-bit scales and
//     mins, as in the file (kquant_scales_mins unpacks them).
// Value of a sub-block l, value v (q the integer read back):
//   d * sc_l * q - dmin * m_l. (Q6_K is in the row-group layout, group_layout.h.)
// Same size as the native row: repacking at load costs no memory beyond the
// copy. Every kernel level and the scalar reference read this layout; the
// kernels keep each sub-block's integer sum exact and scale it once.
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/activation_pack.h"
#include "kernels/matmul.h"

namespace tally {

inline constexpr int kSuperBlock = 256;

// Types stored in this layout: Q4_K, Q5_K.
bool kquant_supported(DType type);
// Bytes of one row of `cols` values (cols % 256 == 0): the native size.
uint64_t kquant_row_bytes(DType type, int64_t cols);
// Rewrites rows x cols values from the native layout (src) into dst.
void repack_kquant(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols);
// Row r of a K-quant matrix as floats (embedding lookups), bit-identical to
// dequantize_row on the native row.
void dequantize_kquant_row(const WeightMatrix& w, int64_t r, float* out);
// The scalar reference product (the KernelTable entry of the scalar level):
// y (x.n, rows) for rows [r0, r1), from x.blocks.
void gemm_kquant_scalar(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1);

// Where the planes of a row of nsb super-blocks start (byte offsets).
struct KquantPlanes {
  int64_t bits;   // Q5_K high bits
  int64_t meta;
};
inline KquantPlanes kquant_planes(DType type, int64_t nsb) {
  const int64_t q = nsb * 128;
  return {q, type == DType::Q5_K ? q + nsb * 32 : q};
}

// The 6-bit scales and mins of the 8 sub-blocks from the 12 packed bytes of
// a Q4_K/Q5_K block: byte l of *sc and *mn is sub-block l's (little-endian).
// Bytes 0-3 hold scales 0-3 (low 6 bits) and the top 2 bits of scales 4-7,
// bytes 4-7 the same for the mins, bytes 8-11 the low 4 bits of scale and
// min 4-7 (scale in the low nibble).
inline void kquant_scales_mins(const uint8_t* s12, uint64_t* sc, uint64_t* mn) {
  uint32_t a, b, c;
  std::memcpy(&a, s12, 4);
  std::memcpy(&b, s12 + 4, 4);
  std::memcpy(&c, s12 + 8, 4);
  const uint32_t sc_hi = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
  const uint32_t mn_hi = ((c >> 4) & 0x0f0f0f0fu) | ((b >> 2) & 0x30303030u);
  *sc = (a & 0x3f3f3f3fu) | static_cast<uint64_t>(sc_hi) << 32;
  *mn = (b & 0x3f3f3f3fu) | static_cast<uint64_t>(mn_hi) << 32;
}

}  // namespace tally
