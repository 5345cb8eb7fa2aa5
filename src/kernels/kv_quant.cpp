#include "kernels/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/dequantize.h"
#include "kernels/kv_format.h"
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
  constexpr int64_t B = KvQ8::kBlockValues;
  for (int64_t b = 0; b < n / B; ++b, x += B, out += KvQ8::kBlockBytes) {
    float amax = 0;
    for (int64_t i = 0; i < B; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const Scale s = scale_of(amax / 127.0f);
    std::memcpy(out, &s.h, kKvScaleBytes);
    for (int64_t i = 0; i < B; ++i)
      out[kKvScaleBytes + i] =
          static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * s.inv), -127.0f, 127.0f)));
  }
}

void quantize_row_q4_0(const float* x, uint8_t* out, int64_t n) {
  constexpr int64_t B = KvQ4::kBlockValues;
  for (int64_t b = 0; b < n / B; ++b, x += B, out += KvQ4::kBlockBytes) {
    float m = 0;  // the value of largest magnitude, with its sign: it maps to q = 0 (-8 d)
    for (int64_t i = 0; i < B; ++i)
      if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
    const Scale s = scale_of(m / -8.0f);
    std::memcpy(out, &s.h, kKvScaleBytes);
    auto q = [&](float v) { return static_cast<uint8_t>(std::clamp(std::nearbyint(v * s.inv) + 8.0f, 0.0f, 15.0f)); };
    for (int64_t j = 0; j < B / 2; ++j) out[kKvScaleBytes + j] = static_cast<uint8_t>(q(x[j]) | q(x[j + B / 2]) << 4);
  }
}

bool kv_cache_type_supported(DType t) { return kv_format_index(t) >= 0; }

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
