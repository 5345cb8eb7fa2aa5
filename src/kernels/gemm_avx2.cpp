// AVX2 instances of the row-group kernels (this file is compiled with
// -mavx2 -mfma -mf16c and only called after the CPU check).
#include "kernels/kernel_table.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/gemm_groups.h"
#endif

namespace tally {

#if defined(__x86_64__) || defined(__i386__)
void install_gemm_avx2(KernelTable& t) {
  install_group_kernels<Rows256<DotAvx2>, 4>(t);
}
#else
void install_gemm_avx2(KernelTable&) {}
#endif

}  // namespace tally
