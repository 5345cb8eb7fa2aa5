#pragma once
// y = x W^T for a quantized weight matrix W (rows x cols, row-major blocks as
// stored in GGUF: dims {cols, rows}) and n_tokens Q8 activation rows.
// Every (row, token) dot runs the same kernel whatever n_tokens is, so a
// prefill of n tokens and n one-token decode steps give bit-identical results.
#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "kernels/activation_q8.h"

namespace tally {

class ThreadPool;

struct WeightMatrix {
  DType type = DType::F32;
  int64_t rows = 0;       // output features
  int64_t cols = 0;       // input features (multiple of 32 / the block size)
  uint64_t row_bytes = 0;
  const uint8_t* data = nullptr;  // rows * row_bytes bytes: the mapped file, or a repacked copy
  bool split = false;             // rows in the split layout of split_layout.h

  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes; }
};

struct ActivationPack;

// x: (n_tokens, cols / 32) blocks; y: (n_tokens, rows) floats. Split-layout
// weights read `pack` (x rearranged, see activation_pack.h); when it is null
// one is built here (allocating: the forward pass passes its own).
void matmul(const WeightMatrix& w, const BlockQ8* x, int64_t n_tokens, float* y, ThreadPool& pool,
            const ActivationPack* pack = nullptr);
// Several products of the same input (q/k/v, gate/up) as one parallel job over
// all their rows: one wait instead of one per matrix, and larger ranges per
// thread. Each y is exactly what matmul() gives.
struct MatmulOut {
  const WeightMatrix* w;
  float* y;
};
void matmul_many(std::span<const MatmulOut> outs, const BlockQ8* x, int64_t n_tokens, ThreadPool& pool,
                 const ActivationPack* pack = nullptr);
// Same with the scalar kernel, one thread: the reference.
void matmul_reference(const WeightMatrix& w, const BlockQ8* x, int64_t n_tokens, float* y);

}  // namespace tally
