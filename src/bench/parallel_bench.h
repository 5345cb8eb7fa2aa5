#pragma once
// Many sequences decoding together, in the spirit of llama-batched-bench:
// for each count N, N different prompts of n_prompt tokens are prefilled
// together, then each sequence decodes n_gen tokens, all N in every step.
// Reported: the prefill throughput of the N prompts, the aggregate decode
// tokens/s, and the time per step (each sequence's time per token).
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "model/model.h"

namespace tally {

struct ParallelBenchOptions {
  int64_t n_prompt = 128;
  int64_t n_gen = 64;
  std::vector<int64_t> parallel{1, 4, 16};
  std::vector<int> threads{1};
  int reps = 1;
  int64_t step_tokens = 512;  // the engine's token budget per step
  DType cache_type = DType::F16;
};

struct ParallelBenchRow {
  int threads = 0;
  int64_t parallel = 0;
  double prefill_tps = 0;    // N * n_prompt / prefill seconds (median of reps)
  double decode_tps = 0;     // N * n_gen / decode seconds, aggregate (median of reps)
  double ms_per_step = 0;    // decode seconds / n_gen: each sequence's time per token
  uint64_t peak_kv_bytes = 0;
};

std::vector<ParallelBenchRow> run_parallel_benchmark(
    const Model& model, const ParallelBenchOptions& o, const std::function<void(const ParallelBenchRow&)>& on_row = {},
    const std::function<void(std::string_view, int64_t, int64_t)>& on_progress = {});

}  // namespace tally

namespace tally {

// Time to the first token of a prompt of n_prompt tokens, cold (nothing
// cached) and warm (its first `cached` tokens left in the prefix cache by an
// earlier sequence), medians of `reps` runs each, interleaved.
struct PrefixHitRow {
  int threads = 0;
  int64_t n_prompt = 0, cached = 0, hit_tokens = 0;
  double cold_ms = 0, warm_ms = 0;
};
PrefixHitRow measure_prefix_hit(const Model& model, int64_t n_prompt, int64_t cached, int threads, int reps);

}  // namespace tally
