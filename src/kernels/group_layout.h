#pragma once
// The row-group layout: Q4_0, Q5_0 and Q8_0 matrices regrouped at load so that one
// SIMD lane is one weight row. 16 rows form a group; for each 32-value block
// the group stores dword k of its 16 rows side by side, so a 64-byte load
// meets 16 rows and one 8-bit activation dword, broadcast, feeds all of them.
// The lanes never mix rows: each row's block sums come out in its own lane,
// with no horizontal sum and no per-block fold, and the block scales of the
// 16 rows load as one vector.
//   group g = rows 16g..16g+15 (rows past the matrix: zero quants and zero
//   scales, never written out), 16 * row_bytes bytes at data + g * 16 * row_bytes,
//   as records of two blocks (nb odd: the last record's second block is
//   zero); record p = blocks 2p and 2p + 1, their scales, then their high
//   bits, then their quants:
//     scales: 32 bytes per block, row i's f16 d at 2i;
//     high bits (Q5_0): 64 bytes per block, row i's 4 at 4i, as the split
//       layout's high bits of a one-block run (split_high_bits_put): byte j
//       holds the 5th bit of value 4k+j at bit 2k and of 16+4k+j at 2k+1, so
//       one shift by 2k puts dword k's bits in place for all 4 bytes;
//     quants: 16 * Q bytes per block (Q = 16 for Q4_0/Q5_0, 32 for Q8_0),
//       dword k (k < Q / 4) of row i at 64k + 4i:
//       Q4_0, Q5_0: the native qs[4k..4k+3] (low nibbles: the low 4 bits of
//         values 4k..4k+3, high nibbles: of values 16+4k..19+4k), unsigned;
//       Q8_0: values 4k..4k+3 plus 128 (the sign bit flipped), unsigned 0..255,
//         so that they are the unsigned operand of the 8-bit dot.
//   One forward stream of whole cache lines: a record is 9 (Q4_0), 11 (Q5_0)
//   or 17 (Q8_0) lines, so with the data on a line (make_weight_matrix aligns it)
//   every quant load is aligned, and decode streams the weights at the read
//   bandwidth (two planes per group, scales apart from quants, read at half
//   of it). row_bytes = record bytes * records / 16, the native row's for an
//   even block count: the layout costs no memory beyond the copy and the padding.
// The product of row r and token t, in every kernel level and in the scalar
// twin: value = d (u - offset), offset 8 for Q4_0, 16 for Q5_0 and 128 for
// Q8_0; over
// blocks b in order, with isum = sum (u - offset) x exactly, as the integer
// sum u * x less offset times the block's activation sum (activation_pack.h),
//   acc = fma(float(isum), d_w * d_x, acc).
// (The offset taken off in float instead, as a second sum of d_w * s_x,
// cancels 128 times the activations' sum against the products' and loses
// bits a model's logits notice.) One lane per row runs exactly this sequence,
// so every level is bit-identical to the scalar twin, whatever the tile
// shape, token count or row range.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/activation_pack.h"
#include "kernels/matmul.h"

namespace tally {

inline constexpr int kGroupRows = 16;

// The geometry of a type in this layout (qs_bytes 0: not stored in it).
struct GroupGeometry {
  int qs_bytes;  // quant bytes of one row's block
  int qh_bytes;  // high-bit bytes of one row's block
  int offset;    // value = d * (u - offset)
  constexpr int record_bytes() const { return 2 * (32 + kGroupRows * (qh_bytes + qs_bytes)); }
};
constexpr GroupGeometry group_geometry(DType type) {
  switch (type) {
    case DType::Q4_0: return {16, 0, 8};
    case DType::Q5_0: return {16, 4, 16};
    case DType::Q8_0: return {32, 0, 128};
    default: return {0, 0, 0};
  }
}

// Types stored in this layout: Q4_0, Q5_0, Q8_0.
bool group_supported(DType type);
// Bytes of the stored matrix (rows rounded up to whole groups), and its row_bytes.
uint64_t group_matrix_bytes(DType type, int64_t rows, int64_t cols);
uint64_t group_row_bytes(DType type, int64_t cols);
// Rewrites rows x cols values from the native layout (src) into dst
// (group_matrix_bytes).
void repack_group(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols);
// Row r of a row-group matrix as floats (embedding lookups), bit-identical to
// dequantize_row on the native row.
void dequantize_group_row(const WeightMatrix& w, int64_t r, float* out);
// The scalar twin of the SIMD kernels: y (x.n, rows) for rows [r0, r1).
void gemm_group_scalar(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1);

// Bytes of a group of rows of `cols` values.
constexpr uint64_t group_bytes(GroupGeometry g, int64_t cols) {
  return static_cast<uint64_t>((cols / 32 + 1) / 2) * g.record_bytes();
}
// Where row i's scale, high bits and quant dword k of block b lie in a group.
constexpr uint64_t group_scale_offset(GroupGeometry g, int64_t b, int i) {
  return static_cast<uint64_t>(b / 2 * g.record_bytes() + b % 2 * 32 + 2 * i);
}
constexpr uint64_t group_high_offset(GroupGeometry g, int64_t b, int i) {
  return static_cast<uint64_t>(b / 2 * g.record_bytes() + 64 + b % 2 * kGroupRows * g.qh_bytes + 4 * i);
}
constexpr uint64_t group_quant_offset(GroupGeometry g, int64_t b, int k, int i) {
  return static_cast<uint64_t>(b / 2 * g.record_bytes() + 64 + 2 * kGroupRows * g.qh_bytes +
                               b % 2 * kGroupRows * g.qs_bytes + 64 * k + 4 * i);
}

}  // namespace tally
