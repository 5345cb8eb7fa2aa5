#pragma once
// Beam search over forked sequences of an Engine, as Hugging Face's
// generate(num_beams=W, do_sample=False) defines it: each step scores every
// (beam, next token) by the beam's sum of log-probabilities plus the token's,
// keeps the 2W best candidates, turns candidates ending in a stop token into
// finished hypotheses (score = sum / generated_length ^ length_penalty; only
// those among the W best), and continues with the W best others. It stops
// when W hypotheses are finished and no running beam can beat the worst of
// them, or at max_tokens (running beams then become hypotheses too).
//
// New beams are forks of their parent: they share its blocks and copy only
// the partly filled last one when they write (copy-on-write). With
// copy_caches every new beam gets a full copy of its parent's cache instead
// (what reordering a dense cache per step costs): same beams, more bytes.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/engine.h"

namespace tally {

struct BeamOptions {
  int width = 4;
  int64_t max_tokens = 64;
  double length_penalty = 1.0;
  bool copy_caches = false;
  std::function<bool(int32_t)> is_stop;  // end-of-generation tokens (kept at the end of a hypothesis)
};

struct BeamHypothesis {
  std::vector<int32_t> tokens;  // generated, ending with the stop token when it stopped
  double sum_logprobs = 0;
  double score = 0;  // sum_logprobs / length ^ length_penalty
};

struct BeamResult {
  std::vector<BeamHypothesis> hypotheses;  // best first, at most width
  int64_t prompt_tokens = 0;
  int64_t steps = 0;                 // decode steps after the prefill
  uint64_t peak_held_bytes = 0;      // K/V held by the sequences at the worst moment
  uint64_t copied_bytes = 0;         // K/V copied (copy-on-write or full copies)
  double prefill_ms = 0, decode_ms = 0;
};

// PRECONDITIONS: width >= 1; the engine can admit the prompt.
BeamResult beam_search(Engine& engine, std::span<const int32_t> prompt, const BeamOptions& o);

}  // namespace tally
