#include "kernels/matmul.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/kernel_table.h"
#include "kernels/split_layout.h"

namespace tally {

namespace {
constexpr int64_t kRowGrain = 16;
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
                                std::unique_ptr<uint8_t[]>& storage) {
  WeightMatrix w{type, rows, cols, row_bytes(type, static_cast<uint64_t>(cols)), native, false};
  if (split_supported(type)) {
    w.row_bytes = split_row_bytes(type, cols);
    storage.reset(new uint8_t[w.row_bytes * static_cast<uint64_t>(rows)]);
    repack_split(type, native, storage.get(), rows, cols);
    w.data = storage.get();
    w.split = true;
  }
  return w;
}

bool matmul_supported(DType type) { return kernels_at(SimdLevel::Scalar).gemm_for(type) != nullptr; }

}  // namespace tally
