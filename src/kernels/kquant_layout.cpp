#include "kernels/kquant_layout.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/kernel_table.h"
#include "kernels/split_layout.h"

namespace tally {
namespace {

// One super-block as integers: the unsigned quants (Q4_K 0..15, Q5_K 0..31)
// and the scales.
struct SuperBlock {
  uint8_t q[kSuperBlock];
  uint8_t meta[16];  // d, dmin, the 12 packed scale bytes as in the file
};

uint64_t native_bytes(DType t) { return traits(t).type_size; }

void unpack_native(DType t, const uint8_t* blk, SuperBlock& sb) {
  std::memcpy(sb.meta, blk, 16);
  const bool q5 = t == DType::Q5_K;
  const uint8_t* qh = blk + 16;
  const uint8_t* qs = blk + (q5 ? 48 : 16);
  for (int c = 0; c < 4; ++c)  // chunk c: low nibbles are sub-block 2c, high nibbles 2c + 1
    for (int l = 0; l < 32; ++l) {
      const int lo = qs[32 * c + l] & 15, hi = qs[32 * c + l] >> 4;
      const int b5lo = q5 ? ((qh[l] >> (2 * c)) & 1) << 4 : 0, b5hi = q5 ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
      sb.q[64 * c + l] = static_cast<uint8_t>(lo | b5lo);
      sb.q[64 * c + 32 + l] = static_cast<uint8_t>(hi | b5hi);
    }
}

// Byte of the quant plane holding the low 4 bits of value v of sub-block l
// (low nibble for v < 16), relative to the super-block's 128 bytes.
int quant_byte(int l, int v) {
  const int b = v % 16;
  return (b / 4 * 8 + l) * 4 + b % 4;
}

void pack_layout(DType t, uint8_t* row, int64_t nsb, int64_t s, const SuperBlock& sb) {
  const KquantPlanes p = kquant_planes(t, nsb);
  uint8_t* qs = row + s * 128;
  for (int l = 0; l < 8; ++l)
    for (int v = 0; v < 32; ++v)
      qs[quant_byte(l, v)] = static_cast<uint8_t>(qs[quant_byte(l, v)] | (sb.q[32 * l + v] & 15) << (v < 16 ? 0 : 4));
  if (t == DType::Q5_K)
    for (int l = 0; l < 8; ++l) {
      uint32_t qh = 0;
      for (int v = 0; v < 32; ++v) qh |= static_cast<uint32_t>(sb.q[32 * l + v] >> 4) << v;
      split_high_bits_put(row + p.bits + s * 32, l, qh);
    }
  std::memcpy(row + p.meta + s * 16, sb.meta, 16);
}

void read_layout(DType t, const uint8_t* row, int64_t nsb, int64_t s, SuperBlock& sb) {
  const KquantPlanes p = kquant_planes(t, nsb);
  const uint8_t* qs = row + s * 128;
  for (int l = 0; l < 8; ++l)
    for (int v = 0; v < 32; ++v) sb.q[32 * l + v] = static_cast<uint8_t>((qs[quant_byte(l, v)] >> (v < 16 ? 0 : 4)) & 15);
  if (t == DType::Q5_K)
    for (int l = 0; l < 8; ++l) {
      const uint32_t qh = split_high_bits_get(row + p.bits + s * 32, l);
      for (int v = 0; v < 32; ++v) sb.q[32 * l + v] = static_cast<uint8_t>(sb.q[32 * l + v] | ((qh >> v) & 1) << 4);
    }
  std::memcpy(sb.meta, row + p.meta + s * 16, 16);
}

void check_cols(DType type, int64_t cols) {
  if (!kquant_supported(type)) fail("K-quant layout does not serve {}", dtype_name(type));
  if (cols <= 0 || cols % kSuperBlock != 0) fail("{} rows of {} values are not whole super-blocks of 256", dtype_name(type), cols);
}

}  // namespace

bool kquant_supported(DType type) { return type == DType::Q4_K || type == DType::Q5_K; }

uint64_t kquant_row_bytes(DType type, int64_t cols) {
  check_cols(type, cols);
  return static_cast<uint64_t>(cols / kSuperBlock) * native_bytes(type);
}

void repack_kquant(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols) {
  const uint64_t bytes = kquant_row_bytes(type, cols);
  const int64_t nsb = cols / kSuperBlock;
  SuperBlock sb;
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = dst + r * bytes;
    std::memset(row, 0, bytes);
    for (int64_t s = 0; s < nsb; ++s) {
      unpack_native(type, src + r * bytes + s * native_bytes(type), sb);
      pack_layout(type, row, nsb, s, sb);
    }
  }
}

// The same expressions as dequantize.cpp's, one rounding per operation (this
// file is built without FMA contraction), so the values are bit-identical.
void dequantize_kquant_row(const WeightMatrix& w, int64_t r, float* out) {
  const int64_t nsb = w.cols / kSuperBlock;
  SuperBlock sb;
  for (int64_t s = 0; s < nsb; ++s) {
    read_layout(w.type, w.row(r), nsb, s, sb);
    float* y = out + s * kSuperBlock;
    const float d = load_f16(sb.meta), dmin = load_f16(sb.meta + 2);
    uint64_t sc, mn;
    kquant_scales_mins(sb.meta + 4, &sc, &mn);
    for (int l = 0; l < 8; ++l) {
      const float dl = d * static_cast<float>((sc >> (8 * l)) & 0xff), ml = dmin * static_cast<float>((mn >> (8 * l)) & 0xff);
      for (int v = 0; v < 32; ++v) {
        const float p = dl * static_cast<float>(sb.q[32 * l + v]);
        y[32 * l + v] = p - ml;
      }
    }
  }
}

// Per (row, token), sub-block by sub-block: the integer sum of the sub-block,
// then acc += (dw * dx) * isum and acc -= (dmin * m) * sx, with dw = d * sc:
// the kernels' integer sums and per-sub-block scale products, summed in a
// different order.
void gemm_kquant_scalar(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
  check_cols(w.type, w.cols);
  const int64_t nsb = w.cols / kSuperBlock, nb = w.cols / 32;
  SuperBlock sb;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < x.n; ++t) {
      float acc = 0;
      for (int64_t s = 0; s < nsb; ++s) {
        read_layout(w.type, w.row(r), nsb, s, sb);
        uint64_t sc = 0, mn = 0;
        kquant_scales_mins(sb.meta + 4, &sc, &mn);
        for (int l = 0; l < 8; ++l) {
          const BlockQ8& xb = x.blocks[t * nb + 8 * s + l];
          const uint8_t* q = sb.q + 32 * l;
          int32_t isum = 0;
          for (int v = 0; v < 32; ++v) isum += q[v] * xb.q[v];
          const float dw = load_f16(sb.meta) * static_cast<float>((sc >> (8 * l)) & 0xff);
          const float mw = load_f16(sb.meta + 2) * static_cast<float>((mn >> (8 * l)) & 0xff);
          acc += dw * xb.d * static_cast<float>(isum);
          acc -= mw * xb.s;
        }
      }
      y[t * w.rows + r] = acc;
    }
}

void install_kquant_scalar(KernelTable& t) {
  for (DType type : {DType::Q4_K, DType::Q5_K}) t.set_gemm(type, gemm_kquant_scalar);
}

}  // namespace tally
