#include "kernels/split_layout.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/kernel_table.h"

namespace tally {
namespace {

struct Geometry {
  int qs_bytes;     // quant bytes per block: 16 (the 4 low bits of each value)
  int block_bytes;  // native block: d | m (has_m) | qh (has_qh) | quants
  bool has_m;
  bool has_qh;
};

Geometry geometry(DType t) {
  switch (t) {
    case DType::Q4_1: return {16, 20, true, false};
    case DType::Q5_1: return {16, 24, true, true};
    default: fail("split layout does not serve {}", dtype_name(t));
  }
}

// Where the planes of a split row start (split_layout.h).
struct Planes {
  int64_t qh, d, m;
};
Planes planes(const Geometry& g, int64_t nb) {
  const int64_t qh = nb * g.qs_bytes, d = qh + (g.has_qh ? nb * 4 : 0);
  return {qh, d, d + nb * 2};
}

// Integer value i (0..31) of a block's quants and qh word.
int quant(const uint8_t* qs, uint32_t qh, int i) {
  return (i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4)) | static_cast<int>((qh >> i) & 1) << 4;
}

}  // namespace

bool split_supported(DType type) {
  return type == DType::Q4_1 || type == DType::Q5_1;
}

uint64_t split_row_bytes(DType type, int64_t cols) {
  return static_cast<uint64_t>(split_blocks(cols)) * static_cast<uint64_t>(geometry(type).block_bytes);
}

void split_block_quants(DType type, const uint8_t* row, int64_t nb, int64_t b, uint8_t* out) {
  const int qsb = geometry(type).qs_bytes;
  for (int k = 0; k < qsb / 4; ++k) std::memcpy(out + 4 * k, row + split_dword_offset(nb, qsb, b, k), 4);
}

uint32_t split_block_high_bits(DType type, const uint8_t* row, int64_t nb, int64_t b) {
  const Geometry g = geometry(type);
  if (!g.has_qh) return 0;
  const SplitRun r = split_run(nb, b);
  return split_high_bits_get(row + planes(g, nb).qh + 4 * r.start, static_cast<int>(b - r.start));
}

void repack_split(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols) {
  const Geometry g = geometry(type);
  const int64_t nb = split_blocks(cols), n_real = cols / 32;
  const Planes pl = planes(g, nb);
  const uint64_t src_bytes = static_cast<uint64_t>(n_real) * g.block_bytes, dst_bytes = split_row_bytes(type, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* s = src + r * src_bytes;
    uint8_t* row = dst + r * dst_bytes;
    std::memset(row, 0, dst_bytes);  // the padding block, if any: zero quants, zero scales
    for (int64_t b = 0; b < n_real; ++b) {
      const uint8_t* blk = s + b * g.block_bytes;
      const uint8_t* quants = blk + g.block_bytes - g.qs_bytes;
      std::memcpy(row + pl.d + 2 * b, blk, 2);
      if (g.has_m) std::memcpy(row + pl.m + 2 * b, blk + 2, 2);
      if (g.has_qh) {
        uint32_t qh;
        std::memcpy(&qh, blk + (g.has_m ? 4 : 2), 4);
        const SplitRun run = split_run(nb, b);
        split_high_bits_put(row + pl.qh + 4 * run.start, static_cast<int>(b - run.start), qh);
      }
      for (int k = 0; k < g.qs_bytes / 4; ++k)
        std::memcpy(row + split_dword_offset(nb, g.qs_bytes, b, k), quants + 4 * k, 4);
    }
  }
}

void dequantize_split_row(const WeightMatrix& w, int64_t r, float* out) {
  const Geometry g = geometry(w.type);
  const int64_t nb = split_blocks(w.cols);
  const uint8_t* row = w.row(r);
  const Planes pl = planes(g, nb);
  uint8_t quants[32];
  for (int64_t b = 0; b < w.cols / 32; ++b) {
    const float db = load_f16(row + pl.d + 2 * b), mb = g.has_m ? load_f16(row + pl.m + 2 * b) : 0.0f;
    split_block_quants(w.type, row, nb, b, quants);
    const uint32_t qh = split_block_high_bits(w.type, row, nb, b);
    for (int i = 0; i < 32; ++i) out[b * 32 + i] = db * static_cast<float>(quant(quants, qh, i)) + mb;
  }
}

void gemm_split_scalar(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
  const Geometry g = geometry(w.type);
  const int64_t nb = split_blocks(w.cols), n_real = w.cols / 32;
  const Planes pl = planes(g, nb);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = w.row(r);
    for (int64_t t = 0; t < x.n; ++t) {
      float acc = 0;
      for (int64_t b = 0; b < n_real; ++b) {
        const BlockQ8& xb = x.blocks[t * n_real + b];
        uint8_t quants[32];
        split_block_quants(w.type, row, nb, b, quants);
        const uint32_t qh = split_block_high_bits(w.type, row, nb, b);
        int32_t isum = 0;
        for (int i = 0; i < 32; ++i) isum += quant(quants, qh, i) * xb.q[i];
        acc += load_f16(row + pl.d + 2 * b) * xb.d * static_cast<float>(isum);
        if (g.has_m) acc += load_f16(row + pl.m + 2 * b) * xb.s;
      }
      y[t * w.rows + r] = acc;
    }
  }
}

void install_split_scalar(KernelTable& t) {
  for (DType type : {DType::Q4_1, DType::Q5_1}) t.set_gemm(type, gemm_split_scalar);
}

}  // namespace tally
