#include "kernels/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/dequantize.h"
#include "kernels/ops.h"

namespace tally {
namespace {

// The stored scale and its inverse (0 for an all-zero block, or one too small for f16).
struct Scale {
  uint16_t h;
  float inv;
};
Scale scale_of(float d) {
  const uint16_t h = f32_to_f16(d);
  const float d16 = f16_to_f32(h);
  return {h, d16 != 0 && std::isfinite(1.0f / d16) ? 1.0f / d16 : 0.0f};
}

}  // namespace

void quantize_row_q8_0(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 34) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const Scale s = scale_of(amax / 127.0f);
    std::memcpy(out, &s.h, 2);
    for (int i = 0; i < 32; ++i)
      out[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * s.inv), -127.0f, 127.0f)));
  }
}

void quantize_row_q4_0(const float* x, uint8_t* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32, out += 18) {
    float m = 0;  // the value of largest magnitude, with its sign: it maps to q = 0 (-8 d)
    for (int i = 0; i < 32; ++i)
      if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
    const Scale s = scale_of(m / -8.0f);
    std::memcpy(out, &s.h, 2);
    auto q = [&](float v) { return static_cast<uint8_t>(std::clamp(std::nearbyint(v * s.inv) + 8.0f, 0.0f, 15.0f)); };
    for (int j = 0; j < 16; ++j) out[2 + j] = static_cast<uint8_t>(q(x[j]) | q(x[j + 16]) << 4);
  }
}

bool kv_cache_type_supported(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::Q8_0 || t == DType::Q4_0;
}

std::string_view kv_cache_type_flag(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_0: return "q4_0";
    default: return dtype_name(t);
  }
}

std::optional<DType> kv_cache_type_from_flag(std::string_view name) {
  for (DType t : {DType::F16, DType::F32, DType::Q8_0, DType::Q4_0})
    if (name == kv_cache_type_flag(t)) return t;
  return std::nullopt;
}

void kv_store_row(DType t, const float* x, uint8_t* out, int64_t n) {
  switch (t) {
    case DType::F32: std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16: to_f16(x, reinterpret_cast<uint16_t*>(out), n); return;
    case DType::Q8_0: quantize_row_q8_0(x, out, n); return;
    case DType::Q4_0: quantize_row_q4_0(x, out, n); return;
    default: fail("KV cache type {} is not supported", dtype_name(t));
  }
}

void kv_load_row(DType t, const uint8_t* in, float* x, int64_t n) {
  dequantize_row(t, in, x, static_cast<uint64_t>(n));
}

}  // namespace tally
