#pragma once
// Runtime CPU dispatch. Kernels pick their SIMD variant from simd_level();
// tests and `--scalar` force the scalar reference path with set_simd_level.
namespace tally {

// Ordered: each level includes the ones before it.
enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx2Vnni = 2 };  // Avx2Vnni: AVX2 + AVX-VNNI (vpdpbusd)

SimdLevel detected_simd_level();  // what this CPU supports
SimdLevel simd_level();           // what kernels use now (<= detected)
void set_simd_level(SimdLevel level);  // clamps to detected_simd_level()
const char* simd_level_name(SimdLevel level);
inline bool simd_at_least(SimdLevel l) { return static_cast<int>(simd_level()) >= static_cast<int>(l); }

}  // namespace tally
