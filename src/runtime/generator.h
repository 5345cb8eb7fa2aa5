#pragma once
// Text generation split as the cache demands: one prefill over the prompt
// (builds every layer's cache, yields the first logits), then a decode loop of
// one token at a time at position = cache length, until an end-of-generation
// token, the token limit or a full context. With use_cache = false every step
// recomputes the whole sequence from an empty cache (the baseline).
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/session.h"
#include "sampler/sampler.h"

namespace tally {

struct GenerateOptions {
  int64_t max_tokens = 128;  // -1: no limit (with a sliding window: forever, until a stop token)
  int64_t sinks = -1;        // >= 0: slide the window past the context keeping this many first tokens (Session::slide)
  bool use_cache = true;
  SamplerParams sampling;
  std::function<bool(int32_t)> is_stop;  // end-of-generation tokens (not emitted)
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated, without the stop token
  int64_t prompt_tokens = 0;
  int64_t decode_steps = 0;     // forward calls after the prefill
  double prefill_ms = 0, decode_ms = 0;
  enum class Stop { EndToken, MaxTokens, ContextFull } stop = Stop::MaxTokens;
  int64_t slid = 0;  // positions dropped by the sliding window
};

// Appends `prompt` to the session (which may already hold earlier turns) and
// generates. on_token sees each emitted token as soon as it is chosen.
GenerateResult generate(Session& s, std::span<const int32_t> prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token = {});

}  // namespace tally
