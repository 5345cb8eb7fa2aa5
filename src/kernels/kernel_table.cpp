#include "kernels/kernel_table.h"

#include <array>

#include "core/error.h"

namespace tally {
namespace {

KernelTable build(SimdLevel level) {
  KernelTable t;
  install_scalar_ops(t);
  install_scalar_attention(t);
  install_group_scalar(t);
  install_row_dot_scalar(t);
  if (level != SimdLevel::Scalar) {  // every SIMD level includes AVX2, FMA and F16C
    install_ops_avx2(t);
    install_attention_avx2(t);
    install_gemm_avx2(t);
  }
  if (level == SimdLevel::Avx2Vnni) install_gemm_vnni(t);
  if (level == SimdLevel::Avx512Vnni) {
    install_ops_avx512(t);
    install_gemm_avx512(t);
    install_attention_avx512(t);
  }
  t.level = level;
  return t;
}

// Built once; a table of a level the CPU lacks is never handed out.
const std::array<KernelTable, 4>& tables() {
  static const std::array<KernelTable, 4> t = {build(SimdLevel::Scalar), build(SimdLevel::Avx2),
                                               build(SimdLevel::Avx2Vnni), build(SimdLevel::Avx512Vnni)};
  return t;
}

}  // namespace

const KernelTable& kernels_at(SimdLevel level) {
  if (!simd_supported(level)) fail("this CPU cannot run the {} kernels", simd_level_name(level));
  return tables()[static_cast<int>(level)];
}

// simd_level() is always a supported level (set_simd_level steps down to one).
const KernelTable& kernels() { return tables()[static_cast<int>(simd_level())]; }

}  // namespace tally
