#pragma once
// The seeds' second open question, answered: how a broken continuity between
// the cache and the start position is detected, and what an edit costs.
// A write whose start is not the sequence's length is refused. Editing token k
// of an n-token prompt truncates the cache to k and recomputes n - k positions,
// giving exactly the logits of a fresh run.
#include <cstdint>
#include <span>
#include <string>

#include "model/model.h"

namespace tally {

struct ContinuityReport {
  int64_t prompt_tokens = 0;
  bool stale_start_refused = false;   // a decode step at length - 1 (re-writing the past)
  bool gap_start_refused = false;     // a decode step at length + 1 (skipping a position)
  std::string refusal_message;
  int64_t edit_at = 0;
  int64_t recomputed_positions = 0;   // counted by the forward pass
  int64_t fresh_positions = 0;        // what a run from scratch computes
  double max_logit_diff = 0;          // edited-and-recomputed vs fresh, over the recomputed positions
  double work_saved = 0;              // 1 - recomputed / fresh
};

ContinuityReport run_continuity_experiment(const Model& model, std::span<const int32_t> prompt, int64_t edit_at,
                                           int32_t replacement, int n_threads);

}  // namespace tally
