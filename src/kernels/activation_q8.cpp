#include "kernels/activation_q8.h"

#include <cmath>

#include "kernels/kernel_table.h"

namespace tally {

void quantize_row_q8_scalar(const float* x, BlockQ8* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d >= 0x1p-126f ? 1.0f / d : 0.0f;  // a subnormal d has no finite 1/d: the block becomes 0
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = static_cast<int>(std::nearbyint(xb[i] * id));
      out[b].q[i] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = d;
    out[b].s = d * static_cast<float>(sum);
  }
}

void quantize_row_q8(const float* x, BlockQ8* out, int64_t n) { kernels().quantize_q8(x, out, n); }

}  // namespace tally
