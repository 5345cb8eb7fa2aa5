// The AVX2 attention kernels (compiled with -mavx2 -mfma -mf16c; called only
// after the CPU check).
#include "kernels/attention_ops_avx2.h"  // first: it includes <immintrin.h>

#include "kernels/attention_chunk.h"
#include "kernels/kernel_table.h"

namespace tally {

#ifdef __AVX2__
void install_attention_avx2(KernelTable& t) { install_attention<Avx2Ops>(t, HeadFit::Vec8); }
#else
void install_attention_avx2(KernelTable&) {}
#endif

}  // namespace tally
