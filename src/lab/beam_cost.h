#pragma once
// The seeds' third open question, measured: what a KV cache costs and saves
// in beam search. For each beam width and prompt length, the same search
// (runtime/beam_search.h) three ways:
//   shared: beams are forks sharing their blocks, copying only the partly
//           filled last block when they write (paged cache);
//   copied: every new beam gets a full copy of its parent's cache, as
//           reordering a dense per-beam cache does each step (HF's index_select);
//   none:   no cache: every step recomputes every beam's whole sequence.
// Reported per run: K/V bytes held at the worst moment, K/V bytes copied,
// time per generated token and in total. `none` is timed over its first
// `none_steps` steps (it grows with the square of the length), its total
// extrapolated from them at its measured rate.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"

namespace tally {

struct BeamCostRow {
  int width = 0;
  int64_t prompt_tokens = 0;
  std::string mode;  // "shared", "copied", "none"
  int64_t generated = 0;        // tokens of the best beam
  int64_t steps_timed = 0;      // steps the time per token was measured over
  uint64_t peak_held_bytes = 0;
  uint64_t copied_bytes = 0;
  double ms_per_token = 0;      // decode time per step (one token per beam)
  double total_ms = 0;          // prefill + decode (none: extrapolated)
  bool same_beams = true;       // equal to the shared run's best beam
};

struct BeamCostOptions {
  std::vector<int> widths{1, 2, 4, 8};
  std::vector<int64_t> prompts{128, 512, 2048};
  int64_t gen_tokens = 64;
  int64_t none_steps = 4;
  int n_threads = 0;
};

// prompt_source: at least max(prompts) tokens (the first n are used for each prompt length).
std::vector<BeamCostRow> measure_beam_cost(const Model& model, std::span<const int32_t> prompt_source,
                                           const BeamCostOptions& o,
                                           const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace tally
