#pragma once
// The kernels of one instruction-set level, resolved once per level: the
// engine calls through kernels() instead of testing the CPU at every call.
//
// Each level's table starts as a copy of the level below it (scalar at the
// bottom) and replaces what it has a faster kernel for, so every entry is
// set at every level. One fast kernel per (concept, level), one scalar
// reference per concept. Invariants, tested: the SIMD levels give results
// bit-identical to each other for the matrix products and the activation
// quantizer (integer sums are exact, the float steps the same), and each
// kernel agrees with the scalar reference within a stated bound.
//
// Each instruction set's kernels live in files named *_avx2.cpp, *_vnni.cpp
// and *_avx512.cpp, compiled for that set alone (CMakeLists.txt gives the
// flags by name); they run only after the CPU check of cpu_features.h.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/activation_pack.h"
#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/kv_format.h"
#include "kernels/kv_layer_view.h"
#include "kernels/matmul.h"

namespace tally {

// y (x.n, w.rows) for rows [r0, r1) of w, from the packed activations.
using GemmFn = void (*)(const WeightMatrix& w, const ActivationPack& x, float* y, int64_t r0, int64_t r1);
// What attention.h's attend_chunk / attend_group / attend_tokens compute, for
// one level, one cache format and one class of head sizes.
using AttendChunkFn = bool (*)(const KvLayerView& kv, const AttendArgs& a, const KeyRange& range, int64_t chunk,
                               float* scores, float* partial);
using AttendGroupFn = void (*)(const KvLayerView& kv, const AttendArgs& a, const KeyRange& range, float* scratch,
                               float* out);
using AttendTokensFn = void (*)(const KvLayerView& kv, const AttendArgs& a, const QueryRun& run, int64_t n_keys,
                                float* scratch, float* out);
struct AttentionKernels {
  AttendChunkFn chunk = nullptr;
  AttendGroupFn group = nullptr;
  AttendTokensFn tokens = nullptr;
};

// Head sizes by the vectors they fill: the SIMD kernels take whole 8- or
// 16-float vectors, so the table keeps an entry per class instead of each
// kernel testing the size at every call.
enum class HeadFit : uint8_t { Any = 0, Vec8 = 1, Vec16 = 2 };
inline constexpr int kHeadFits = 3;
constexpr HeadFit head_fit(int64_t head_dim) {
  return head_dim % 16 == 0 ? HeadFit::Vec16 : head_dim % 8 == 0 ? HeadFit::Vec8 : HeadFit::Any;
}

inline constexpr uint32_t kDTypeSlots = 40;  // GGUF type ids are below this

struct KernelTable {
  SimdLevel level = SimdLevel::Scalar;
  GemmFn gemm[kDTypeSlots] = {};  // null: the engine has no product for that weight type
  void (*quantize_q8)(const float* x, BlockQ8* out, int64_t n) = nullptr;
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  void (*gelu_tanh_mul)(const float* gate, const float* up, float* out, int64_t n) = nullptr;
  void (*to_f16)(const float* x, uint16_t* out, int64_t n) = nullptr;
  void (*exp_each)(const float* x, float* out, int64_t n) = nullptr;
  // By kv_format_index(cache type), then head_fit(head_dim); every entry set at every level.
  AttentionKernels attend[kKvFormats][kHeadFits] = {};

  GemmFn gemm_for(DType t) const { return static_cast<uint32_t>(t) < kDTypeSlots ? gemm[static_cast<uint32_t>(t)] : nullptr; }
  void set_gemm(DType t, GemmFn f) { gemm[static_cast<uint32_t>(t)] = f; }
  // The attention kernels for this cache; fails for a type no cache holds.
  const AttentionKernels& attention(const KvLayerView& kv) const;
};

// The table of simd_level().
const KernelTable& kernels();
// The table of `level`, which this CPU must support (simd_supported).
const KernelTable& kernels_at(SimdLevel level);

// What each file adds to a table; kernel_table.cpp calls them level by level.
void install_scalar_ops(KernelTable& t);        // ops.cpp, activation_q8.cpp
void install_scalar_attention(KernelTable& t);  // attention.cpp
void install_group_scalar(KernelTable& t);      // group_layout.cpp
void install_row_dot_scalar(KernelTable& t);    // gemm_scalar.cpp
void install_ops_avx2(KernelTable& t);          // ops_avx2.cpp
void install_attention_avx2(KernelTable& t);    // attention_avx2.cpp
void install_gemm_avx2(KernelTable& t);         // gemm_avx2.cpp
void install_gemm_vnni(KernelTable& t);         // gemm_vnni.cpp
void install_gemm_avx512(KernelTable& t);       // gemm_avx512.cpp
void install_ops_avx512(KernelTable& t);        // ops_avx512.cpp
void install_attention_avx512(KernelTable& t);  // attention_avx512.cpp

}  // namespace tally
