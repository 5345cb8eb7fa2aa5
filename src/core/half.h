#pragma once
// IEEE binary16 and bfloat16 <-> float conversions (scalar reference; exact).
#include <cstdint>
#include <cstring>

namespace tally {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      bits = sign | (uint32_t)(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | mant << 13;
  } else {
    bits = sign | (exp + 112) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even float -> binary16.
inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7fffffff;
  if (absx >= 0x7f800000) return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000 ? 0x200 : 0));
  if (absx >= 0x477ff000) return (uint16_t)(sign | 0x7c00);  // overflow -> inf
  if (absx < 0x38800000) {                                   // subnormal or zero
    if (absx < 0x33000000) return (uint16_t)sign;
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return (uint16_t)(sign | r);
  }
  uint32_t r = ((absx - 0x38000000) >> 13);
  const uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return (uint16_t)(sign | r);
}

// An fp16 field of a quantized block: blocks inside a GGUF mapping are not
// aligned for their 2-byte members (block sizes 18, 20, 22, ... bytes).
inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

inline float bf16_to_f32(uint16_t h) {
  const uint32_t bits = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace tally
