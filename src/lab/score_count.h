#pragma once
// How many (query, key) scores one head of one block computes while a model
// writes N tokens. Recomputing everything at step k scores a k x k matrix
// (the textbook dense form, then masked): 1^2 + ... + N^2. With a cache, step
// k scores one query against k keys: N(N+1)/2. The measured counts come from
// the real attention kernel during a real greedy generation.
#include <cstdint>
#include <functional>
#include <optional>

#include "model/model.h"

namespace tally {

struct ScoreCounts {
  int64_t n = 0;
  uint64_t recompute_formula = 0;  // sum k^2
  uint64_t cached_formula = 0;     // N(N+1)/2
  std::optional<uint64_t> recompute_measured;
  std::optional<uint64_t> cached_measured;
};

uint64_t sum_of_squares(int64_t n);
uint64_t triangular(int64_t n);
ScoreCounts score_formulas(int64_t n);

// Scores per head per block while writing n tokens greedily from `first`:
// use_cache: one prefill token then one new token per step; otherwise every
// step recomputes the whole sequence with dense-then-masked attention.
// progress(done, total), if given, after each step: token positions computed so far and in all.
uint64_t measure_scores(const Model& model, int32_t first, int64_t n, bool use_cache, int n_threads,
                        const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace tally
