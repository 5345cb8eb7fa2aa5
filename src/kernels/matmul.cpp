#include "kernels/matmul.h"

#include <algorithm>

#include "kernels/activation_pack.h"
#include "kernels/gemm.h"
#include "kernels/split_layout.h"
#include "kernels/vec_dot.h"
#include "core/thread_pool.h"

namespace tally {

namespace {
constexpr int64_t kRowGrain = 16;

void matmul_rows(VecDotFn dot, const WeightMatrix& w, const BlockQ8* x, int64_t n_tokens, float* y,
                 int64_t r0, int64_t r1) {
  const int64_t xb = w.cols / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr = w.row(r);
    for (int64_t t = 0; t < n_tokens; ++t) y[t * w.rows + r] = dot(wr, x + t * xb, w.cols);
  }
}
}  // namespace

void matmul(const WeightMatrix& w, const BlockQ8* x, int64_t n_tokens, float* y, ThreadPool& pool,
            const ActivationPack* pack) {
  const MatmulOut out{&w, y};
  matmul_many({&out, 1}, x, n_tokens, pool, pack);
}

void matmul_many(std::span<const MatmulOut> outs, const BlockQ8* x, int64_t n_tokens, ThreadPool& pool,
                 const ActivationPack* pack) {
  ActivationPack local;
  int64_t total = 0;
  for (const MatmulOut& o : outs) {
    if (o.w->split && !pack && split_gemm_fn(o.w->type)) {
      local.build(x, n_tokens, o.w->cols / 32);
      pack = &local;
    }
    total += o.w->rows;
  }
  // Rows [r0, r1) of matrix o, by the fastest kernel that serves it.
  auto rows = [&](const MatmulOut& o, int64_t r0, int64_t r1) {
    const WeightMatrix& w = *o.w;
    if (w.split) {
      if (const SplitGemmFn split = split_gemm_fn(w.type)) return split(w, *pack, o.y, r0, r1);
      return matmul_split_scalar(w, x, n_tokens, o.y, r0, r1);
    }
    if (const GemmFn gemm = gemm_fn(w.type)) return gemm(w, x, n_tokens, o.y, r0, r1);
    matmul_rows(vec_dot_fn(w.type), w, x, n_tokens, o.y, r0, r1);
  };
  // The rows of all matrices back to back; a thread's range may span several.
  pool.parallel_for(
      total,
      [&](int64_t b, int64_t e, int) {
        int64_t off = 0;
        for (const MatmulOut& o : outs) {
          const int64_t r0 = std::max(b, off), r1 = std::min(e, off + o.w->rows);
          if (r0 < r1) rows(o, r0 - off, r1 - off);
          off += o.w->rows;
        }
      },
      kRowGrain);
}

void matmul_reference(const WeightMatrix& w, const BlockQ8* x, int64_t n_tokens, float* y) {
  if (w.split) return matmul_split_scalar(w, x, n_tokens, y, 0, w.rows);
  matmul_rows(vec_dot_fn_scalar(w.type), w, x, n_tokens, y, 0, w.rows);
}

}  // namespace tally
