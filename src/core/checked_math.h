#pragma once
// Overflow-checked size arithmetic for everything computed from file contents.
#include <cstdint>
#include <optional>

namespace tally {

// The largest size (layers, heads, rows, ...) a model file or config may
// state. Any real model is far below this; larger sizes are a typo or a
// corrupt file, and refusing them keeps every later product inside 64 bits.
inline constexpr int64_t kMaxModelDim = int64_t{1} << 31;

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Rounds x up to a multiple of align (a power of two); nullopt on overflow.
inline std::optional<uint64_t> align_up(uint64_t x, uint64_t align) {
  auto s = checked_add(x, align - 1);
  if (!s) return std::nullopt;
  return *s & ~(align - 1);
}

}  // namespace tally
