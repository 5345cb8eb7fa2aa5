// AVX-512 VNNI instances of the split and K-quant layout kernels (compiled with
// -mavx512f/bw/vl and -mavx512vnni; called only when the CPU has them). Runs of
// 8 blocks load 64 bytes (two of the 256-bit kernels' loads) per instruction;
// shorter runs take the 256-bit code with the EVEX vpdpbusd. Integer block
// sums are exact and the float steps are those of the 256-bit kernels, so
// results are bit-identical to them.
#include "kernels/x86_intrinsics.h"  // first: see there
#include "kernels/kernel_table.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/gemm_groups.h"
#endif

namespace tally {

#if defined(__x86_64__) || defined(__i386__)
void install_gemm_avx512(KernelTable& t) {
  install_split_kernels<Lanes512>(t);
  install_group_kernels<Rows512, 4>(t);
}
#else
void install_gemm_avx512(KernelTable&) {}
#endif

}  // namespace tally
