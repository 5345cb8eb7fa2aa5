#pragma once
// Decode speed against context depth: at each depth D the cache holds D
// tokens and one decode step reads D x bytes_per_token of K/V besides the
// weights. Past the planner's crossover context the cache is the bigger read.
// Depths are reached by prefilling further and rolling back the timed steps.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "model/model.h"

namespace tally {

struct DepthPoint {
  int64_t depth = 0;
  double decode_tps = 0;
  double ms_per_token = 0;
  uint64_t kv_bytes_read = 0;      // K/V bytes one step reads at this depth
  uint64_t weight_bytes_read = 0;  // weight bytes one step reads
};

struct DepthReport {
  uint64_t kv_bytes_per_token = 0;
  uint64_t weight_bytes = 0;
  int64_t crossover_context = 0;  // depth where K/V bytes read exceed weight bytes read
  std::vector<DepthPoint> points;
};

// filler: tokens to prefill with (cycled); decode_steps timed at each depth.
// progress(done, total), if given, before each fill and each timed depth: tokens processed so far and in all.
DepthReport measure_depth(const Model& model, std::span<const int32_t> filler, std::span<const int64_t> depths,
                          int64_t decode_steps, DType cache_type, int n_threads,
                          const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace tally
