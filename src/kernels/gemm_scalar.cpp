// The scalar matrix products of the plain float formats (F32, F16, BF16),
// which have no regrouped layout: one dot product per (row, token),
// converting the weights 256 values at a time (never expanded whole) and
// multiplying by d * q of the 8-bit activations. These are the only products
// of these formats at every level (kernel_table.h). The quantized formats
// live in group_layout.h.
#include <algorithm>

#include "kernels/dequantize.h"
#include "kernels/kernel_table.h"

namespace tally {
namespace {

float dot_dequantized(DType type, const uint8_t* w, const BlockQ8* x, int64_t n) {
  const auto& tr = traits(type);
  constexpr int64_t kStep = 256;
  float buf[kStep];
  float acc = 0;
  for (int64_t v = 0; v < n; v += kStep) {
    const int64_t len = std::min(kStep, n - v);  // n % 32 == 0
    dequantize_row(type, w + v * tr.type_size, buf, static_cast<uint64_t>(len));
    for (int64_t i = 0; i < len; i += 32) {
      const BlockQ8& xb = x[(v + i) / 32];
      float s = 0;
      for (int k = 0; k < 32; ++k) s += buf[i + k] * xb.q[k];
      acc += s * xb.d;
    }
  }
  return acc;
}

// Rows [r0, r1) of w times the tokens of x, one dot per (row, token).
template <DType T>
void gemm_rows(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
  const int64_t xb = w.cols / 32;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t t = 0; t < x.n; ++t) y[t * w.rows + r] = dot_dequantized(T, w.row(r), x.blocks + t * xb, w.cols);
}

}  // namespace

void install_row_dot_scalar(KernelTable& t) {
  t.set_gemm(DType::F32, gemm_rows<DType::F32>);
  t.set_gemm(DType::F16, gemm_rows<DType::F16>);
  t.set_gemm(DType::BF16, gemm_rows<DType::BF16>);
}

}  // namespace tally
