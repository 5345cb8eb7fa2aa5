#pragma once
// Rows of a quantized KV cache: f32 -> GGUF Q8_0 / Q4_0 blocks (traits() has
// their sizes, kv_format.h their layout; ../shared/docs/facts.md has the
// GGUF definitions), and the one-call dispatch for every cache number format
// (f32, f16, q8_0, q4_0).
//
// The scale is rounded to f16 first and the values are quantized against the
// rounded scale, so a stored value is off by at most half a step of it:
//   q8_0: |x - q * d| <= d / 2,  d = f16(max|x| / 127)
//   q4_0: |x - (q - 8) * d| <= |d|, d = f16(m / -8), m the value of largest
//         magnitude (the step is |d|; the top of the range clamps at 7, as in GGUF).
// Pure functions, thread-safe; the reader of these blocks is dequantize.h.
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace tally {

// n values (n % 32 == 0) into n / 32 blocks at out (no alignment needed).
void quantize_row_q8_0(const float* x, uint8_t* out, int64_t n);
void quantize_row_q4_0(const float* x, uint8_t* out, int64_t n);

// The cache formats: true for the types a KV cache can hold.
bool kv_cache_type_supported(DType t);
// The name a user writes (--cache-type): "f32", "f16", "q8_0", "q4_0"; and back (nullopt if not one of them).
std::string_view kv_cache_type_flag(DType t);
std::optional<DType> kv_cache_type_from_flag(std::string_view name);
inline constexpr std::string_view kKvCacheTypeFlags = "f16, f32, q8_0 or q4_0";
// x (n values) into row_bytes(t, n) bytes, and back. PRECONDITION: kv_cache_type_supported(t).
void kv_store_row(DType t, const float* x, uint8_t* out, int64_t n);
void kv_load_row(DType t, const uint8_t* in, float* x, int64_t n);

}  // namespace tally
