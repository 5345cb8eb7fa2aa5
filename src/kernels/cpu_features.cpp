#include "kernels/cpu_features.h"

#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tally {
namespace {

struct Features {
  bool avx2 = false;      // with FMA and F16C
  bool avx_vnni = false;  // CPUID.(7,1):EAX bit 4
  bool avx512 = false;    // F, BW, VL and VNNI, with the OS saving zmm state
};

Features detect() {
  Features f;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  if (!f.avx2) return f;
  f.avx_vnni = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
  return f;
}

const Features& features() {
  static const Features f = detect();
  return f;
}

std::atomic<SimdLevel>& current() {
  static std::atomic<SimdLevel> level{detected_simd_level()};
  return level;
}

}  // namespace

bool simd_native(SimdLevel level) {
  const Features& f = features();
  switch (level) {
    case SimdLevel::Scalar: return true;
    case SimdLevel::Avx2: return f.avx2;
    case SimdLevel::Avx2Vnni: return f.avx2 && f.avx_vnni;
    case SimdLevel::Avx512Vnni: return f.avx2 && f.avx512;
  }
  return false;
}

bool simd_supported(SimdLevel level) {
#if defined(TALLY_EMULATE_SIMD)
  // The AVX-512 and AVX-VNNI kernels are emulated on AVX2 in this build.
  if (level != SimdLevel::Scalar && features().avx2) return true;
#endif
  return simd_native(level);
}

SimdLevel detected_simd_level() {
  for (SimdLevel l : {SimdLevel::Avx512Vnni, SimdLevel::Avx2Vnni, SimdLevel::Avx2})
    if (simd_native(l)) return l;
  return SimdLevel::Scalar;
}

SimdLevel simd_level() { return current().load(std::memory_order_relaxed); }

void set_simd_level(SimdLevel level) {
  int l = static_cast<int>(level);
  while (l > 0 && !simd_supported(static_cast<SimdLevel>(l))) --l;
  current().store(static_cast<SimdLevel>(l));
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512Vnni: return "avx512+vnni";
    case SimdLevel::Avx2Vnni: return "avx2+vnni";
    case SimdLevel::Avx2: return "avx2";
    default: return "scalar";
  }
}

bool simd_level_from_name(std::string_view name, SimdLevel& level) {
  for (SimdLevel l : {SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx2Vnni, SimdLevel::Avx512Vnni})
    if (name == simd_level_name(l)) {
      level = l;
      return true;
    }
  return false;
}

}  // namespace tally
