#pragma once
// Prefill (pp) and decode (tg) throughput at given cache depths and thread
// counts, in the spirit of llama-bench, with what explains each figure: bytes
// read per token and the achieved GB/s for decode, GFLOP/s for prefill, each
// as a share of the machine's measured limits.
#include <cstdint>
#include <functional>
#include <string>
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
  DType cache_type = DType::F16;
};

struct BenchRow {
  std::string test;  // "pp512", "tg128"
  int threads = 0;
  int64_t depth = 0;
  double tps_mean = 0, tps_stddev = 0;
  double bytes_per_token = 0;  // tg: weights + K/V read per step
  double gbps = 0;             // tg: bytes_per_token * tps
  double flops_per_token = 0;  // pp
  double gflops = 0;           // pp
  double pct_limit = 0;        // tg: % of read bandwidth; pp: % of FMA peak (0 when not probed)
};

// Multiply-adds of one token through every matrix (weights' rows x cols summed).
uint64_t matmul_macs_per_token(const Model& m);

// on_row is called as each row completes (for streaming output).
std::vector<BenchRow> run_benchmark(const Model& model, const BenchOptions& o,
                                    const std::vector<MachineLimits>& limits,
                                    const std::function<void(const BenchRow&)>& on_row = {});

}  // namespace tally
