// AVX-VNNI instances of the row-group kernels (compiled with -mavxvnni as
// well; called only when the CPU has it). vpdpbusd computes the same integer
// sums as the AVX2 maddubs + madd pair, so results are bit-identical.
#include "kernels/kernel_table.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/gemm_groups.h"
#endif

namespace tally {

#if defined(__x86_64__) || defined(__i386__)
void install_gemm_vnni(KernelTable& t) {
  install_group_kernels<Rows256<DotVnni>, 4>(t);
}
#else
void install_gemm_vnni(KernelTable&) {}
#endif

}  // namespace tally
