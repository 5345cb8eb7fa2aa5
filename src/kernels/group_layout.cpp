#include "kernels/group_layout.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/dequantize.h"
#include "kernels/kernel_table.h"

namespace tally {
namespace {

constexpr int kBlockBytes = 18;  // Q4_0: d (f16) | 16 bytes of nibbles

void require(DType type) {
  if (!group_supported(type)) fail("row-group layout does not serve {}", dtype_name(type));
}

const uint8_t* group_of(const WeightMatrix& w, int64_t r) {
  return w.data + static_cast<uint64_t>(r / kGroupRows) * group_bytes(w.cols);
}

// Row i's block b of a group, as the native 18 bytes.
void native_block(const uint8_t* group, int64_t b, int i, uint8_t* out) {
  std::memcpy(out, group + group_scale_offset(b, i), 2);
  for (int k = 0; k < 4; ++k) std::memcpy(out + 2 + 4 * k, group + group_quant_offset(b, k, i), 4);
}

}  // namespace

bool group_supported(DType type) { return type == DType::Q4_0; }

uint64_t group_matrix_bytes(DType type, int64_t rows, int64_t cols) {
  require(type);
  return static_cast<uint64_t>((rows + kGroupRows - 1) / kGroupRows) * group_bytes(cols);
}

uint64_t group_row_bytes(int64_t cols) { return group_bytes(cols) / kGroupRows; }

void repack_group(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols) {
  const int64_t nb = cols / 32;
  const uint64_t rb = row_bytes(type, static_cast<uint64_t>(cols));
  std::memset(dst, 0, group_matrix_bytes(type, rows, cols));  // the last group's padding rows
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* group = dst + static_cast<uint64_t>(r / kGroupRows) * group_bytes(cols);
    const int i = static_cast<int>(r % kGroupRows);
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = src + r * rb + b * kBlockBytes;
      std::memcpy(group + group_scale_offset(b, i), blk, 2);
      for (int k = 0; k < 4; ++k) std::memcpy(group + group_quant_offset(b, k, i), blk + 2 + 4 * k, 4);
    }
  }
}

void dequantize_group_row(const WeightMatrix& w, int64_t r, float* out) {
  const int64_t nb = w.cols / 32;
  uint8_t blk[kBlockBytes];
  for (int64_t b = 0; b < nb; ++b) {
    native_block(group_of(w, r), b, static_cast<int>(r % kGroupRows), blk);
    dequantize_row(w.type, blk, out + 32 * b, 32);
  }
}

void gemm_group_scalar(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
  const int64_t nb = w.cols / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* group = group_of(w, r);
    const int i = static_cast<int>(r % kGroupRows);
    for (int64_t t = 0; t < x.n; ++t) {
      float acc = 0, accm = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8& xb = x.blocks[t * x.token_blocks + b];
        int32_t isum = 0;
        for (int k = 0; k < 4; ++k) {
          const uint8_t* q = group + group_quant_offset(b, k, i);
          for (int j = 0; j < 4; ++j) isum += (q[j] & 15) * xb.q[4 * k + j] + (q[j] >> 4) * xb.q[16 + 4 * k + j];
        }
        const float dw = load_f16(group + group_scale_offset(b, i));
        acc = std::fma(static_cast<float>(isum), dw * xb.d, acc);
        accm = std::fma(dw, xb.s, accm);
      }
      y[t * w.rows + r] = std::fma(accm, -8.0f, acc);
    }
  }
}

void install_group_scalar(KernelTable& t) { t.set_gemm(DType::Q4_0, gemm_group_scalar); }

}  // namespace tally
