#include "kernels/ops.h"

#include <cmath>

#include "core/half.h"
#include "kernels/activation_q8.h"
#include "kernels/kernel_table.h"

namespace tally {

void rms_norm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  // In double: the sum of 576+ squares loses bits in float. Four chains, so
  // that the adds do not wait on each other: the order moves the double sum
  // by ~1e-16 of itself, which the float scale sees about once in 10^9.
  double s4[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) s4[j] += static_cast<double>(x[i + j]) * x[i + j];
  for (; i < n; ++i) s4[0] += static_cast<double>(x[i]) * x[i];
  const double ss = (s4[0] + s4[1]) + (s4[2] + s4[3]);
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_tanh_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float x3 = x * x * x;
    const float t = kGeluTwoC * (x + kGeluCubic * x3);
    out[i] = x / (1.0f + std::exp(-t)) * up[i];
  }
}

void exp_each_scalar(const float* x, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i]);
}

void to_f16_scalar(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

void silu_mul(const float* gate, const float* up, float* out, int64_t n) { kernels().silu_mul(gate, up, out, n); }

void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  kernels().gelu_tanh_mul(gate, up, out, n);
}

void to_f16(const float* x, uint16_t* out, int64_t n) { kernels().to_f16(x, out, n); }

void install_scalar_ops(KernelTable& t) {
  t.quantize_q8 = quantize_row_q8_scalar;
  t.silu_mul = silu_mul_scalar;
  t.gelu_tanh_mul = gelu_tanh_mul_scalar;
  t.to_f16 = to_f16_scalar;
  t.exp_each = exp_each_scalar;
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void rope_angles(int64_t pos, int64_t rot_dims, float base, float* cos_out, float* sin_out) {
  for (int64_t i = 0; i < rot_dims / 2; ++i) {
    const double theta = static_cast<double>(pos) * std::pow(static_cast<double>(base), -2.0 * i / rot_dims);
    cos_out[i] = static_cast<float>(std::cos(theta));
    sin_out[i] = static_cast<float>(std::sin(theta));
  }
}

void rope_apply(float* x, int64_t n_heads, int64_t head_dim, int64_t rot_dims, const float* cos_a,
                const float* sin_a, RopePairing pairing) {
  const int64_t half = rot_dims / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = pairing == RopePairing::Adjacent ? 2 * i : i;
      const int64_t b = pairing == RopePairing::Adjacent ? 2 * i + 1 : i + half;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cos_a[i] - x1 * sin_a[i];
      v[b] = x0 * sin_a[i] + x1 * cos_a[i];
    }
  }
}

}  // namespace tally
