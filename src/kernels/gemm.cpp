#include "kernels/gemm.h"

#include "kernels/cpu_features.h"

namespace tally {

GemmFn gemm_fn(DType type) {
#if defined(__x86_64__) || defined(__i386__)
  if (simd_at_least(SimdLevel::Avx512Vnni)) return gemm_avx512_fn(type);
  if (simd_at_least(SimdLevel::Avx2Vnni)) return gemm_vnni_fn(type);
  if (simd_at_least(SimdLevel::Avx2)) return gemm_avx2_fn(type);
#endif
  (void)type;
  return nullptr;
}

}  // namespace tally
