// Line-aligned memory (core/line_aligned.h) starts on a 64-byte line at every
// size, including the large ones that plain new hands out 16 bytes into a
// page, and so do the KV cache's blocks and the repacked weight matrices.
#include "core/line_aligned.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/matmul.h"
#include "kv/kv_storage.h"

namespace tally {
namespace {

bool on_line(const void* p) { return reinterpret_cast<uintptr_t>(p) % kCacheLine == 0; }

TEST(LineAligned, VectorsAndBytesStartOnALineAtEverySize) {
  for (size_t n : {size_t{1}, size_t{3}, size_t{1000}, size_t{1} << 18, (size_t{1} << 22) + 5}) {
    LineVector<float> v(n);
    EXPECT_TRUE(on_line(v.data())) << n << " floats";
    v.resize(2 * n + 1);  // a reallocation keeps it
    EXPECT_TRUE(on_line(v.data())) << 2 * n + 1 << " floats";
    const LineBytes b = line_bytes(n);
    ASSERT_TRUE(b);
    EXPECT_TRUE(on_line(b.get())) << n << " bytes";
  }
}

TEST(LineAligned, KvBlocksOfWholeLinesStartOnLines) {
  // 2 kv heads x 32 positions x 64 values: every f16 / f32 block is whole
  // lines, so each starts on one and so does each head vector.
  const KvShape shape{3, 2, 64};
  for (DType t : {DType::F16, DType::F32}) {
    KvStorage s(shape, 32, 5, t, uint64_t{1} << 30);
    for (int64_t l = 0; l < shape.n_layer; ++l)
      for (int64_t b = 0; b < s.n_blocks(); ++b) {
        EXPECT_TRUE(on_line(s.k_block(l, b))) << dtype_name(t) << " layer " << l << " block " << b;
        EXPECT_TRUE(on_line(s.v_block(l, b))) << dtype_name(t) << " layer " << l << " block " << b;
      }
  }
}

TEST(LineAligned, RepackedMatricesStartOnALine) {
  const int64_t rows = 64, cols = 256;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    std::vector<uint8_t> native(row_bytes(t, cols) * rows, 0);
    LineBytes storage;
    const WeightMatrix w = make_weight_matrix(t, rows, cols, native.data(), storage);
    ASSERT_EQ(w.layout, RowLayout::Group) << dtype_name(t);
    EXPECT_TRUE(on_line(w.data)) << dtype_name(t);
  }
}

}  // namespace
}  // namespace tally
