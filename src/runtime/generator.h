#pragma once
// Text generation split as the cache demands: one prefill over the prompt
// (builds every layer's cache, yields the first logits), then a decode loop of
// one token at a time at position = cache length, each token through the one
// generation step (runtime/generation.h), until it finishes: an
// end-of-generation token, a stop string, the token limit or a full context.
// With use_cache = false every step recomputes the whole sequence from an
// empty cache (the baseline).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "runtime/generation.h"
#include "runtime/session.h"
#include "runtime/speculation.h"

namespace tally {

struct GenerateOptions : GenerationParams {
  int64_t sinks = -1;  // >= 0: slide the window past the context keeping this many first tokens (Session::slide)
  bool use_cache = true;
  // > 0: speculative decoding with prompt lookup (runtime/speculation.h), at
  // most this many guesses verified per step (the session needs as many + 1
  // rows of logits: EngineOptions::logit_rows). Greedy output is unchanged;
  // sampled output keeps its distribution.
  int64_t draft_max = 0;
  bool fixed_draft = false;  // true: always draft_max guesses, where they fit (a sweep over k); false: adaptive
  // With draft_max > 0: the guesses come from this draft model's session
  // (DraftModel; its vocabulary checked by check_draft_vocabulary) instead of
  // prompt lookup. Not owned; its cache follows this generation's tokens.
  Session* draft = nullptr;
  int64_t draft_vocab = 0;  // the draft guesses from these first ids and the history's (DraftModel; 0: all)
  // Set (by another thread or a signal handler): the generation finishes as
  // Cancelled after the token it is making, which is kept.
  const std::atomic<bool>* cancel = nullptr;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated, without the end token
  std::string text;             // their text, cut at a stop string (with a tokenizer)
  int64_t prompt_tokens = 0;
  int64_t decode_steps = 0;     // forward calls after the prefill
  double prefill_ms = 0, decode_ms = 0;
  Finish stop = Finish::MaxTokens;
  int64_t slid = 0;  // positions dropped by the sliding window
  // Prompt positions taken from the prefix cache's disk tier (a first prompt
  // of a session with one), of them loaded from disk.
  int64_t cached_tokens = 0, disk_tokens = 0;
  // Speculation: guesses verified, and kept; positions written then rolled
  // back, in the target's cache and in the draft model's.
  int64_t drafted = 0, accepted = 0, rolled_back = 0, draft_rolled_back = 0;
  int64_t rolled_back_blocks = 0;  // blocks of the target's cache a rollback wrote into (summed over rollbacks)

  // Tokens chosen from the decode steps' logits (the first comes from the
  // prefill's; an end token counts): decode_steps without speculation, more
  // with it. The decode speed is these over decode_ms.
  int64_t decoded_tokens() const {
    return std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) + (stop == Finish::EndToken ? 1 : 0) - 1);
  }
};

// Appends `prompt` to the session (which may already hold earlier turns) and
// generates. An empty session with a disk tier first takes the longest
// prefix of the prompt that the prefix cache holds. on_emit sees each emission (a token with its text piece, and
// held text at the end) as soon as it is made. tok: for text and stop strings.
GenerateResult generate(Session& s, std::span<const int32_t> prompt, const GenerateOptions& o,
                        const std::function<void(const Emission&)>& on_emit = {}, const Tokenizer* tok = nullptr);

}  // namespace tally
