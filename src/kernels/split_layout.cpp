#include "kernels/split_layout.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu_features.h"

namespace tally {
namespace {

struct Geometry {
  int qs_bytes;   // per block
  int block_bytes;
  bool has_m;
};

Geometry geometry(DType t) {
  switch (t) {
    case DType::Q4_0: return {16, 18, false};
    case DType::Q4_1: return {16, 20, true};
    case DType::Q8_0: return {32, 34, false};
    default: fail("split layout does not serve {}", dtype_name(t));
  }
}

// Integer value i (0..31) of a block's quants, offset removed for symmetric formats.
int quant(DType t, const uint8_t* qs, int i) {
  if (t == DType::Q8_0) return static_cast<int8_t>(qs[i]);
  const int q = i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4);
  return t == DType::Q4_0 ? q - 8 : q;
}

}  // namespace

bool split_supported(DType type, int64_t cols) {
  return (type == DType::Q4_0 || type == DType::Q4_1 || type == DType::Q8_0) && cols % 64 == 0;
}

void split_block_quants(DType type, const uint8_t* row, int64_t nb, int64_t b, uint8_t* out) {
  const int qsb = geometry(type).qs_bytes;
  for (int k = 0; k < qsb / 4; ++k) std::memcpy(out + 4 * k, row + split_dword_offset(nb, qsb, b, k), 4);
}

void repack_split(DType type, const uint8_t* src, uint8_t* dst, int64_t rows, int64_t cols) {
  const Geometry g = geometry(type);
  const int64_t nb = cols / 32;
  const int64_t row_bytes = nb * g.block_bytes;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* s = src + r * row_bytes;
    uint8_t* qs = dst + r * row_bytes;
    uint8_t* d = qs + nb * g.qs_bytes;
    uint8_t* m = d + nb * 2;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = s + b * g.block_bytes;
      const uint8_t* quants = blk + (g.has_m ? 4 : 2);
      std::memcpy(d + 2 * b, blk, 2);
      if (g.has_m) std::memcpy(m + 2 * b, blk + 2, 2);
      for (int k = 0; k < g.qs_bytes / 4; ++k)
        std::memcpy(qs + split_dword_offset(nb, g.qs_bytes, b, k), quants + 4 * k, 4);
    }
  }
}

void dequantize_split_row(const WeightMatrix& w, int64_t r, float* out) {
  const Geometry g = geometry(w.type);
  const int64_t nb = w.cols / 32;
  const uint8_t* qs = w.row(r);
  const uint8_t* d = qs + nb * g.qs_bytes;
  const uint8_t* m = d + nb * 2;
  uint8_t quants[32];
  for (int64_t b = 0; b < nb; ++b) {
    const float db = load_f16(d + 2 * b), mb = g.has_m ? load_f16(m + 2 * b) : 0.0f;
    split_block_quants(w.type, qs, nb, b, quants);
    for (int i = 0; i < 32; ++i) out[b * 32 + i] = db * static_cast<float>(quant(w.type, quants, i)) + mb;
  }
}

void matmul_split_scalar(const WeightMatrix& w, const BlockQ8* x, int64_t n_tokens, float* y, int64_t r0,
                         int64_t r1) {
  const Geometry g = geometry(w.type);
  const int64_t nb = w.cols / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* qs = w.row(r);
    const uint8_t* d = qs + nb * g.qs_bytes;
    const uint8_t* m = d + nb * 2;
    for (int64_t t = 0; t < n_tokens; ++t) {
      float acc = 0;
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ8& xb = x[t * nb + b];
        uint8_t quants[32];
        split_block_quants(w.type, qs, nb, b, quants);
        int32_t isum = 0;
        for (int i = 0; i < 32; ++i) isum += quant(w.type, quants, i) * xb.q[i];
        acc += load_f16(d + 2 * b) * xb.d * static_cast<float>(isum);
        if (g.has_m) acc += load_f16(m + 2 * b) * xb.s;
      }
      y[t * w.rows + r] = acc;
    }
  }
}

SplitGemmFn split_gemm_fn(DType type) {
#if defined(__x86_64__) || defined(__i386__)
  if (simd_at_least(SimdLevel::Avx512Vnni)) return split_gemm_avx512_fn(type);
  if (simd_at_least(SimdLevel::Avx2Vnni)) return split_gemm_vnni_fn(type);
  if (simd_at_least(SimdLevel::Avx2)) return split_gemm_avx2_fn(type);
#endif
  (void)type;
  return nullptr;
}

}  // namespace tally
