// AVX-VNNI instances of the tiled kernels (compiled with -mavxvnni as well;
// called only when the CPU has it). vpdpbusd computes the same integer sums
// as the AVX2 maddubs + madd pair, so results are bit-identical.
#include "kernels/gemm.h"
#include "kernels/split_layout.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/gemm_tiles.h"
#endif

namespace tally {

#if defined(__x86_64__) || defined(__i386__)
GemmFn gemm_vnni_fn(DType type) { return gemm_for<DotVnni>(type); }
SplitGemmFn split_gemm_vnni_fn(DType type) { return split_gemm_for<Lanes256<DotVnni>>(type); }
#else
GemmFn gemm_vnni_fn(DType) { return nullptr; }
SplitGemmFn split_gemm_vnni_fn(DType) { return nullptr; }
#endif

}  // namespace tally
