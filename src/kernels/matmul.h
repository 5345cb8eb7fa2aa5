#pragma once
// y = x W^T for a weight matrix W (rows x cols, row-major blocks as stored in
// GGUF: dims {cols, rows}) and n_tokens Q8 activation rows, by the kernel of
// the current level (kernel_table.h) for W's type, rows spread over a pool.
// Every (row, token) dot runs the same arithmetic whatever n_tokens is, so a
// prefill of n tokens and n one-token decode steps give bit-identical results.
#include <cstdint>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "core/line_aligned.h"
#include "kernels/activation_pack.h"
#include "kernels/activation_q8.h"

namespace tally {

class ThreadPool;

// How a matrix's rows are stored: as in the file (F32, F16, BF16) or, for
// every quantized type the kernels multiply, in groups of 16 interleaved rows
// (group_layout.h).
// The type decides it.
enum class RowLayout : uint8_t { Native, Group };

struct WeightMatrix {
  DType type = DType::F32;
  int64_t rows = 0;       // output features
  int64_t cols = 0;       // input features (multiple of 32 / the block size)
  uint64_t row_bytes = 0;
  const uint8_t* data = nullptr;  // rows * row_bytes bytes (whole groups for Group): the file, or a repacked copy
  RowLayout layout = RowLayout::Native;

  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes; }
};

// A matrix of `type` in the layout its kernels read, from rows x cols values
// stored as GGUF blocks at `native`: the split and K-quant formats are
// repacked into `storage` (allocated here), the others point at `native`.
WeightMatrix make_weight_matrix(DType type, int64_t rows, int64_t cols, const uint8_t* native,
                                LineBytes& storage);
// Row r of w as cols floats, whatever its layout (embedding lookups);
// bit-identical to dequantize_row on the row as stored in the file.
void dequantize_matrix_row(const WeightMatrix& w, int64_t r, float* out);

// x: the activations packed once per input (activation_pack.h); y: (x.n, rows) floats.
void matmul(const WeightMatrix& w, const ActivationPack& x, float* y, ThreadPool& pool);
// Several products of the same input (q/k/v, gate/up) as one parallel job over
// all their rows: one wait instead of one per matrix, and larger ranges per
// thread. Each y is exactly what matmul() gives.
struct MatmulOut {
  const WeightMatrix* w;
  float* y;
};
void matmul_many(std::span<const MatmulOut> outs, const ActivationPack& x, ThreadPool& pool);

// True when some kernel level multiplies matrices of `type`.
bool matmul_supported(DType type);

}  // namespace tally
