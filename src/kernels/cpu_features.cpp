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
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c)) return SimdLevel::Scalar;
  // AVX-VNNI: CPUID leaf 7, sub-leaf 1, EAX bit 4.
  const bool vnni = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;
  return vnni ? SimdLevel::Avx2Vnni : SimdLevel::Avx2;
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

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx2Vnni: return "avx2+vnni";
    case SimdLevel::Avx2: return "avx2";
    default: return "scalar";
  }
}

}  // namespace tally
