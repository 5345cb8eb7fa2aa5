#pragma once
// The attention kernels alone, in CPU time: a cache of a model's shape filled
// with random keys and values, then (a) one decode step's attention at each
// depth (every layer and kv head, its GQA group of queries over all cached
// positions), (b) a block of queries each over the first keys of one layer,
// one query at a time (attend_group), and (c) the prefill path on one layer:
// as many causal queries at the positions after those keys, kAttentionTokens
// at a time (attend_tokens). One thread; the thread's CPU time
// (CLOCK_THREAD_CPUTIME_ID), so a neighbour taking the core for a while shows
// less than in wall time.
// Invariant: the cache holds max(depths, prefill_keys + prefill_queries)
// positions of every layer before anything is timed, and every timed call
// reads only those.
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kv/kv_shape.h"

namespace tally {

struct AttentionBenchOptions {
  KvShape shape;               // layers, kv heads, head_dim of the cache
  int64_t n_head = 0;          // query heads (a multiple of shape.n_kv_head)
  DType cache_type = DType::F16;
  std::vector<int64_t> depths{8000};
  int64_t prefill_queries = 64;
  int64_t prefill_keys = 2048;
  int reps = 9;                // each figure is the median of reps
};

struct AttentionBenchRow {
  int64_t depth = 0;
  double decode_ms = 0;   // one decode step's attention over `depth` positions, all layers
};

struct AttentionBenchResult {
  std::vector<AttentionBenchRow> decode;
  double prefill_ms = 0;       // prefill_queries queries x prefill_keys keys, one layer, one query at a time
  double prefill_path_ms = 0;  // prefill_queries causal queries after prefill_keys keys, one layer (attend_tokens)
};

AttentionBenchResult run_attention_benchmark(const AttentionBenchOptions& o);

}  // namespace tally
