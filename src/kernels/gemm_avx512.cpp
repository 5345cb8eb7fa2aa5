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
// 8-token tiles (32 registers hold 8 tokens' accumulators): the unpacking of
// each weight load is shared by twice the tokens. Standalone products (576 x
// 1536 and 1536 x 576, 512 tokens) against 4-token tiles: Q5_0 +10-14%, Q5_K
// +8%, Q6_K +5-9%, Q5_1 +6%, Q4_K +3%, Q4_0/Q4_1 -2 to +3%, Q8_0 -1 to +2%.
void install_gemm_avx512(KernelTable& t) {
  install_group_kernels<Rows512, 8, 4>(t);
}
#else
void install_gemm_avx512(KernelTable&) {}
#endif

}  // namespace tally
