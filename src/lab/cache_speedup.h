#pragma once
// Cache vs no cache, measured: the same greedy generation of N tokens once
// with the KV cache (one new token per step) and once recomputing the whole
// sequence at every step. Both must write the same tokens; the timings say
// what the cache saves at each length.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "model/model.h"

namespace tally {

struct SpeedupPoint {
  int64_t n = 0;                       // tokens generated so far
  double cache_total_ms = 0, nocache_total_ms = 0;
  double cache_ms_per_token = 0, nocache_ms_per_token = 0;  // mean over the steps since the previous point
  double ratio = 0;                    // nocache_total / cache_total
};

struct SpeedupReport {
  int64_t prompt_tokens = 0;
  bool same_tokens = false;
  std::vector<SpeedupPoint> points;
};

// progress(done, total), if given, after each token: token positions computed so far and in all.
SpeedupReport measure_cache_speedup(const Model& model, std::span<const int32_t> prompt, int64_t gen_tokens,
                                    std::span<const int64_t> checkpoints, int n_threads,
                                    const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace tally
