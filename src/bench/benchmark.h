#pragma once
// Prefill (pp) and decode (tg) throughput at given cache depths and thread
// counts, in the spirit of llama-bench (an untimed warmup like its default,
// then timed repetitions), with what explains each figure: bytes read per
// token and the achieved GB/s for decode, GFLOP/s and 8-bit GOP/s for
// prefill, each as a share of the machine's measured limits.
//
// How prefill work is counted (per token of a prefill of n tokens at depth d):
// - flops_per_token: 2 per multiply-add of every layer matrix, plus the output
//   matrix once per prefill (only the last token's logits are computed),
//   divided by n, plus attention's 4 x n_layer x n_head x head_dim per key
//   (d + (n + 1) / 2 keys on average).
// - int8_ops_per_token: 2 per multiply-add of the matrices whose products run
//   as 8-bit integer dot products (each weight value x each token = one
//   multiply-add), counted the same way; attention and the matrices of other
//   types run in floating point and are left out.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/machine_probe.h"
#include "core/dtype.h"
#include "model/model.h"

namespace tally {

struct BenchOptions {
  int64_t n_prompt = 512;  // pp test size (0: skip)
  int64_t n_gen = 128;     // tg test size (0: skip)
  std::vector<int64_t> depths{0};
  std::vector<int> threads{1};
  int reps = 3;
  bool warmup = true;  // one untimed pp (n_prompt tokens) / tg (1 step) before each test's reps
  DType cache_type = DType::F16;
};

struct BenchRow {
  std::string test;  // "pp512", "tg128"
  int threads = 0;
  int64_t depth = 0;
  double tps_mean = 0, tps_stddev = 0;
  double bytes_per_token = 0;     // tg: weights + K/V read per step
  double gbps = 0;                // tg: bytes_per_token * tps
  double flops_per_token = 0;     // pp
  double gflops = 0;              // pp
  double int8_ops_per_token = 0;  // pp: 8-bit multiply-adds x 2
  double int8_gops = 0;           // pp: int8_ops_per_token * tps
  double pct_limit = 0;           // tg: % of read bandwidth; pp: % of FMA peak (0 when not probed)
  double pct_int8_peak = 0;       // pp: % of the int8 dot-product peak (0 when not probed)
};

// The row's share of the limit that bounds it, for a table: decode against
// the read bandwidth; prefill against the int8 dot-product peak when its
// matrices run as int8 products (the f32 FMA peak would flatter it about 4x),
// against the FMA peak when they run in floating point. "" when not probed.
std::string limit_summary(const BenchRow& r);

// Ordinary token k of a deterministic stream that benchmarks feed (the
// content does not change the work): past the first quarter of the
// vocabulary, where control tokens sit, capped at id 1000.
int32_t filler_token(uint64_t k, int64_t n_vocab);

// Multiply-adds of one token through every matrix (weights' rows x cols summed).
uint64_t matmul_macs_per_token(const Model& m);
// Whether the kernels compute products with weights of type t as 8-bit
// integer dot products against the 8-bit activations: the types of the
// row-group layout (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K).
bool runs_as_int8(DType t);
// Multiply-adds of a prefill of n tokens through the matrices: every layer
// matrix for each token, the output matrix for the last token only.
// int8_only: only the matrices for which runs_as_int8 holds.
uint64_t prefill_matmul_macs(const Model& m, int64_t n_tokens, bool int8_only);

// Called before each timed repetition (and depth fill): what runs, and
// done / total repetitions of the whole benchmark.
using BenchProgress = std::function<void(std::string_view what, int64_t done, int64_t total)>;

// on_row is called as each row completes (for streaming output).
std::vector<BenchRow> run_benchmark(const Model& model, const BenchOptions& o,
                                    const std::vector<MachineLimits>& limits,
                                    const std::function<void(const BenchRow&)>& on_row = {},
                                    const BenchProgress& on_progress = {});

}  // namespace tally
