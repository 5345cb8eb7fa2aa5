#include "kernels/cpu_features.h"

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tally {
namespace {

SimdLevel detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) return SimdLevel::Avx2;
#endif
  return SimdLevel::Scalar;
}

std::atomic<SimdLevel>& current() {
  static std::atomic<SimdLevel> level{detected_simd_level()};
  return level;
}

}  // namespace

SimdLevel detected_simd_level() {
  static const SimdLevel level = detect();
  return level;
}

SimdLevel simd_level() { return current().load(std::memory_order_relaxed); }

void set_simd_level(SimdLevel level) {
  const SimdLevel max = detected_simd_level();
  current().store(static_cast<int>(level) > static_cast<int>(max) ? max : level);
}

const char* simd_level_name(SimdLevel level) { return level == SimdLevel::Avx2 ? "avx2" : "scalar"; }

}  // namespace tally
