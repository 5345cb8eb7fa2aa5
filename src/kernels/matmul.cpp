#include "kernels/matmul.h"

#include "kernels/activation_pack.h"
#include "kernels/gemm.h"
#include "kernels/split_layout.h"
#include "kernels/vec_dot.h"
#include "runtime/thread_pool.h"

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
  if (w.split) {
    const SplitGemmFn split = split_gemm_fn(w.type);
    if (!split) {
      pool.parallel_for(
          w.rows, [&](int64_t r0, int64_t r1, int) { matmul_split_scalar(w, x, n_tokens, y, r0, r1); }, kRowGrain);
      return;
    }
    ActivationPack local;
    if (!pack) {
      local.build(x, n_tokens, w.cols / 32);
      pack = &local;
    }
    pool.parallel_for(
        w.rows, [&](int64_t r0, int64_t r1, int) { split(w, *pack, y, r0, r1); }, kRowGrain);
    return;
  }
  if (const GemmFn gemm = gemm_fn(w.type)) {
    pool.parallel_for(
        w.rows, [&](int64_t r0, int64_t r1, int) { gemm(w, x, n_tokens, y, r0, r1); }, kRowGrain);
    return;
  }
  const VecDotFn dot = vec_dot_fn(w.type);
  pool.parallel_for(
      w.rows, [&](int64_t r0, int64_t r1, int) { matmul_rows(dot, w, x, n_tokens, y, r0, r1); }, kRowGrain);
}

void matmul_reference(const WeightMatrix& w, const BlockQ8* x, int64_t n_tokens, float* y) {
  if (w.split) return matmul_split_scalar(w, x, n_tokens, y, 0, w.rows);
  matmul_rows(vec_dot_fn_scalar(w.type), w, x, n_tokens, y, 0, w.rows);
}

}  // namespace tally
