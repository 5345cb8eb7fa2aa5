#pragma once
// Runtime CPU dispatch. Kernels pick their SIMD variant from simd_level();
// tests and `--scalar` force the scalar reference path with set_simd_level.
#include <string_view>

namespace tally {

// Ordered by preference. Every level above Scalar includes AVX2, FMA and F16C.
// Avx2Vnni adds AVX-VNNI (VEX vpdpbusd); Avx512Vnni adds AVX-512 F/BW/VL/VNNI.
// A CPU may have Avx512Vnni without Avx2Vnni (Ice Lake): simd_supported() tells.
enum class SimdLevel { Scalar = 0, Avx2 = 1, Avx2Vnni = 2, Avx512Vnni = 3 };

// This CPU can run kernels of `level`: natively, or (in a TALLY_EMULATE_SIMD
// test build) emulated, which is how AVX-512 and AVX-VNNI kernels are tested
// on an AVX2 machine. Emulated levels are never chosen by default.
bool simd_supported(SimdLevel level);
bool simd_native(SimdLevel level);     // ... with its own instructions
SimdLevel detected_simd_level();       // the best native level
SimdLevel simd_level();                // what kernels use now (supported, <= detected)
// Uses `level`, or the best supported level below it.
void set_simd_level(SimdLevel level);
const char* simd_level_name(SimdLevel level);
// The level named `name` (as simd_level_name prints it); false if none is.
bool simd_level_from_name(std::string_view name, SimdLevel& level);
inline bool simd_at_least(SimdLevel l) { return static_cast<int>(simd_level()) >= static_cast<int>(l); }

}  // namespace tally
