#include "kernels/activation_q8.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/kernel_table.h"

namespace tally {

namespace {
// x (a whole number) as the SIMD conversions give it: a NaN or a value
// outside int32 (from an infinite or NaN input) becomes INT32_MIN, where a
// plain cast would be undefined.
int32_t to_int32(float x) {
  return x >= -0x1p31f && x < 0x1p31f ? static_cast<int32_t>(x) : std::numeric_limits<int32_t>::min();
}
}  // namespace

void quantize_row_q8_scalar(const float* x, BlockQ8* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + b * 32;
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f;
    const float id = d >= 0x1p-126f ? 1.0f / d : 0.0f;  // a subnormal d has no finite 1/d: the block becomes 0
    uint32_t sum = 0;  // int32 lanes added as the SIMD levels add them: wrapping
    for (int i = 0; i < 32; ++i) {
      const int32_t q = to_int32(std::nearbyint(xb[i] * id));
      out[b].q[i] = static_cast<int8_t>(std::clamp(q, -128, 127));
      sum += static_cast<uint32_t>(q);
    }
    out[b].d = d;
    out[b].s = d * static_cast<float>(static_cast<int32_t>(sum));
  }
}

void quantize_row_q8(const float* x, BlockQ8* out, int64_t n) { kernels().quantize_q8(x, out, n); }

}  // namespace tally
