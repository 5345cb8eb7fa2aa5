// AVX-512 VNNI instances of the tiled kernels (compiled with -mavx512f/bw/vl
// and -mavx512vnni; called only when the CPU has them). The split kernels load
// 64 bytes (two dwords of 8 blocks) per instruction; the native-layout tiles
// use the 256-bit EVEX vpdpbusd. Integer block sums are exact and the float
// steps are those of the 256-bit kernels, so results are bit-identical to them.
#include "kernels/gemm.h"
#include "kernels/split_layout.h"

#if defined(__x86_64__) || defined(__i386__)
#include "kernels/gemm_tiles.h"
#endif

namespace tally {

#if defined(__x86_64__) || defined(__i386__)
GemmFn gemm_avx512_fn(DType type) { return gemm_for<DotVnni512>(type); }
SplitGemmFn split_gemm_avx512_fn(DType type) { return split_gemm_for<Lanes512>(type); }
#else
GemmFn gemm_avx512_fn(DType) { return nullptr; }
SplitGemmFn split_gemm_avx512_fn(DType) { return nullptr; }
#endif

}  // namespace tally
