#pragma once
// Parallel sampling: n continuations of one prompt. The prompt is evaluated
// once; the continuations are forks of it (sharing its blocks; each copies
// only the partly filled last block when it first writes) that sample with
// their own seeds (seed + i) and stop on their own. Continuation i is the
// one a single generate() with seed + i would write.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "runtime/engine.h"
#include "runtime/generator.h"

namespace tally {

struct ParallelResult {
  std::vector<GenerateResult> continuations;
  uint64_t peak_held_bytes = 0;  // K/V held by all of them at the worst moment
  int64_t cached_prompt_tokens = 0;
};

// on_emit(i, emission) sees continuation i's emissions as they are made;
// tok: for text and stop strings (runtime/generation.h).
ParallelResult generate_parallel(Engine& engine, std::span<const int32_t> prompt, int n, const GenerateOptions& o,
                                 const std::function<void(int, const Emission&)>& on_emit = {},
                                 const Tokenizer* tok = nullptr);

}  // namespace tally
