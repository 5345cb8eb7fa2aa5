#pragma once
// The row-group layout: Q4_0 matrices regrouped at load so that one SIMD lane
// is one weight row. 16 rows form a group; for each 32-value block the group
// stores dword k (k = 0..3) of its 16 rows side by side, so a 64-byte load
// meets 16 rows and one 8-bit activation dword, broadcast, feeds all of them.
// The lanes never mix rows: each row's block sums come out in its own lane,
// with no horizontal sum and no per-block fold, and the block scales of the
// 16 rows load as one vector.
//   group g = rows 16g..16g+15 (rows past the matrix: zero quants and zero
//   scales, never written out), 16 * row_bytes bytes at data + g * 16 * row_bytes,
//   as records of two blocks (nb odd: the last record's second block is
//   zero), 576 bytes each; record p = blocks 2p and 2p + 1:
//     scales: 32 bytes per block, row i's f16 d at 2i;
//     quants: 256 bytes per block, dword k of row i at 64k + 4i: the native
//       qs[4k..4k+3] of row i's block (low nibbles: values 4k..4k+3, high
//       nibbles: values 16+4k..19+4k).
//   One forward stream of whole cache lines: a record is 9 lines, so with the
//   data on a line (make_weight_matrix aligns it) every quant load is aligned,
//   and decode streams the weights at the read bandwidth (two planes per
//   group, scales apart from quants, read at half of it).
//   row_bytes = 576 * records / 16, the native row's (nb * 18) for even nb:
//   the layout costs no memory beyond the copy and the padding.
// The product of row r and token t, in every kernel level and in the scalar
// twin: over blocks b in order, with isum the exact integer sum of q * x,
//   acc = fma(float(isum), d_w * d_x, acc), accm = fma(d_w, s_x, accm);
// then fma(accm, -8, acc) (value = d (q - 8)). One lane per row runs exactly
// this sequence, so every level is bit-identical to the scalar twin, whatever
// the tile shape, token count or row range.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/activation_pack.h"
#include "kernels/matmul.h"

namespace tally {

inline constexpr int kGroupRows = 16;

// Types stored in this layout: Q4_0.
bool group_supported(DType type);
// Bytes of the stored matrix: rows rounded up to whole groups; its row_bytes.
uint64_t group_matrix_bytes(DType type, int64_t rows, int64_t cols);
uint64_t group_row_bytes(int64_t cols);
// Rewrites rows x cols values from the native layout (src) into dst
// (group_matrix_bytes).
void repack_group(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols);
// Row r of a row-group matrix as floats (embedding lookups), bit-identical to
// dequantize_row on the native row.
void dequantize_group_row(const WeightMatrix& w, int64_t r, float* out);
// The scalar twin of the SIMD kernels: y (x.n, rows) for rows [r0, r1).
void gemm_group_scalar(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1);

inline constexpr int kGroupRecordBytes = 576;  // two blocks of 16 rows: 2 x (32 scale + 256 quant bytes)
// Bytes of a group of rows of `cols` values.
inline uint64_t group_bytes(int64_t cols) { return static_cast<uint64_t>((cols / 32 + 1) / 2) * kGroupRecordBytes; }
// Where dword k of row i's block b, and row i's scale of block b, lie in a group.
inline uint64_t group_scale_offset(int64_t b, int i) {
  return static_cast<uint64_t>(b / 2 * kGroupRecordBytes + b % 2 * 32 + 2 * i);
}
inline uint64_t group_quant_offset(int64_t b, int k, int i) {
  return static_cast<uint64_t>(b / 2 * kGroupRecordBytes + 64 + b % 2 * 256 + 64 * k + 4 * i);
}

}  // namespace tally
