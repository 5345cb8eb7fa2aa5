// AVX-512 VNNI instances of the row-group kernels (compiled with
// -mavx512f/bw/vl and -mavx512vnni; called only when the CPU has them): a
// whole group of 16 rows per vector. Integer block sums are exact and the
// float steps are those of the 256-bit kernels, so results are bit-identical
// to them.
#include "kernels/x86_intrinsics.h"  // first: see there
#include "kernels/kernel_table.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/gemm_groups.h"
#endif

namespace tally {

#if defined(__x86_64__) || defined(__i386__)
void install_gemm_avx512(KernelTable& t) {
  install_group_kernels<Rows512, 4>(t);
}
#else
void install_gemm_avx512(KernelTable&) {}
#endif

}  // namespace tally
