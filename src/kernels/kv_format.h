#pragma once
// The KV cache's number formats as types known at compile time. The
// attention kernels are instantiated once per format and the kernel table
// picks the instance when it is built, so no kernel tests the cache's type
// while it runs. Every size comes from core/dtype.h's traits().
#include <cstdint>

#include "core/dtype.h"

namespace tally {

template <DType T>
struct KvFormat {
  static constexpr DType kType = T;
  static constexpr int64_t kBlockValues = traits(T).block_size;  // 1 for f32 and f16
  static constexpr int64_t kBlockBytes = traits(T).type_size;
  static constexpr bool kBlocks = kBlockValues > 1;  // Q8_0, Q4_0: GGUF blocks, read as stored
  static constexpr bool kF32 = T == DType::F32;
  static constexpr bool kQ4 = T == DType::Q4_0;
  // Bytes of n values (n a multiple of kBlockValues).
  static constexpr uint64_t bytes(int64_t n) {
    return static_cast<uint64_t>(n) / static_cast<uint64_t>(kBlockValues) * static_cast<uint64_t>(kBlockBytes);
  }
};
using KvF32 = KvFormat<DType::F32>;
using KvF16 = KvFormat<DType::F16>;
using KvQ8 = KvFormat<DType::Q8_0>;
using KvQ4 = KvFormat<DType::Q4_0>;

// The block formats' layout, as the kernels read it: an f16 scale, then 32
// values, one int8 each (Q8_0) or two 4-bit ones a byte (Q4_0, value i in
// byte i's low half, value i + 16 in its high half). A query is quantized
// in blocks of the same 32 values.
inline constexpr int64_t kKvBlockValues = KvQ8::kBlockValues;
inline constexpr int64_t kKvScaleBytes = 2;
static_assert(KvQ4::kBlockValues == kKvBlockValues);
static_assert(KvQ8::kBlockBytes == kKvScaleBytes + kKvBlockValues);
static_assert(KvQ4::kBlockBytes == kKvScaleBytes + kKvBlockValues / 2);

// The formats a cache holds, as indexes of the kernel table's attention
// entries (-1: a type no cache holds).
inline constexpr int kKvFormats = 4;
constexpr int kv_format_index(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q8_0: return 2;
    case DType::Q4_0: return 3;
    default: return -1;
  }
}

}  // namespace tally
