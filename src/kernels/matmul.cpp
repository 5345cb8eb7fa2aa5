#include "kernels/matmul.h"

#include <algorithm>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/dequantize.h"
#include "kernels/group_layout.h"
#include "kernels/kernel_table.h"

namespace tally {

namespace {
constexpr int64_t kRowGrain = kGroupRows;  // thread ranges take whole row groups (the kernels also take parts)
}  // namespace

void matmul(const WeightMatrix& w, const ActivationPack& x, float* y, ThreadPool& pool) {
  const MatmulOut out{&w, y};
  matmul_many({&out, 1}, x, pool);
}

void matmul_many(std::span<const MatmulOut> outs, const ActivationPack& x, ThreadPool& pool) {
  const KernelTable& k = kernels();
  int64_t total = 0;
  for (const MatmulOut& o : outs) {
    if (!k.gemm_for(o.w->type)) fail("no matrix kernel for tensor type {}", dtype_name(o.w->type));
    total += o.w->rows;
  }
  // The rows of all matrices back to back; a thread's range may span several.
  pool.parallel_for(
      total,
      [&](int64_t b, int64_t e, int) {
        int64_t off = 0;
        for (const MatmulOut& o : outs) {
          const int64_t r0 = std::max(b, off), r1 = std::min(e, off + o.w->rows);
          if (r0 < r1) k.gemm_for(o.w->type)(*o.w, x, o.y, r0 - off, r1 - off);
          off += o.w->rows;
        }
      },
      kRowGrain);
}

WeightMatrix make_weight_matrix(DType type, int64_t rows, int64_t cols, const uint8_t* native,
                                LineBytes& storage) {
  WeightMatrix w{type, rows, cols, row_bytes(type, static_cast<uint64_t>(cols)), native, RowLayout::Native};
  if (group_supported(type)) {
    w.row_bytes = group_row_bytes(type, cols);
    const uint64_t bytes = group_matrix_bytes(type, rows, cols);
    storage = line_bytes(bytes);
    if (!storage)
      fail("cannot allocate {} for a {} x {} {} matrix", format_bytes(bytes), rows, cols, dtype_name(type));
    w.data = storage.get();
    repack_group(type, native, const_cast<uint8_t*>(w.data), rows, cols);
    w.layout = RowLayout::Group;
  }
  return w;
}

void dequantize_matrix_row(const WeightMatrix& w, int64_t r, float* out) {
  switch (w.layout) {
    case RowLayout::Group: return dequantize_group_row(w, r, out);
    case RowLayout::Native: return dequantize_row(w.type, w.row(r), out, static_cast<uint64_t>(w.cols));
  }
}

bool matmul_supported(DType type) { return kernels_at(SimdLevel::Scalar).gemm_for(type) != nullptr; }

}  // namespace tally
