#pragma once
// Runtime CPU dispatch. Kernels pick their SIMD variant from simd_level();
// tests and `--scalar` force the scalar reference path with set_simd_level.
namespace tally {

enum class SimdLevel { Scalar = 0, Avx2 = 1 };

SimdLevel detected_simd_level();  // what this CPU supports
SimdLevel simd_level();           // what kernels use now (<= detected)
void set_simd_level(SimdLevel level);  // clamps to detected_simd_level()
const char* simd_level_name(SimdLevel level);

}  // namespace tally
