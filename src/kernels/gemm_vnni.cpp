// AVX-VNNI instances of the tiled kernels (compiled with -mavxvnni as well;
// called only when the CPU has it). vpdpbusd computes the same integer sums
// as the AVX2 maddubs + madd pair, so results are bit-identical.
#include "core/dtype.h"
#include "kernels/gemm.h"
#include "kernels/split_layout.h"
#if defined(__x86_64__) || defined(__i386__)
#include "kernels/gemm_tiles.h"
#endif

namespace tally {

#if defined(__x86_64__) || defined(__i386__)
namespace {
template <class F>
void gemm_vnni(const WeightMatrix& w, const BlockQ8* x, int64_t n, float* y, int64_t r0, int64_t r1) {
  gemm_rows<F, DotVnni>(w, x, n, y, r0, r1);
}
}  // namespace

GemmFn gemm_vnni_fn(DType type) {
  switch (type) {
    case DType::Q4_0: return gemm_vnni<FmtQ4_0>;
    case DType::Q4_1: return gemm_vnni<FmtQ4_1>;
    case DType::Q8_0: return gemm_vnni<FmtQ8_0>;
    default: return nullptr;
  }
}

namespace {
template <class S>
void split_vnni(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1) {
  split_rows<S, DotVnni>(w, x, y, r0, r1);
}
}  // namespace

SplitGemmFn split_gemm_vnni_fn(DType type) {
  switch (type) {
    case DType::Q4_0: return split_vnni<SplitQ4_0>;
    case DType::Q4_1: return split_vnni<SplitQ4_1>;
    case DType::Q8_0: return split_vnni<SplitQ8_0>;
    default: return nullptr;
  }
}
#else
GemmFn gemm_vnni_fn(DType) { return nullptr; }
SplitGemmFn split_gemm_vnni_fn(DType) { return nullptr; }
#endif

}  // namespace tally
