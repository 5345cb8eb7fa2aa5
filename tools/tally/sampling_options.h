#pragma once
// Sampling flags shared by `run` and `chat`, and the seed they start from.
#include <CLI/CLI.hpp>
#include <cstdint>

#include "sampler/sampler.h"

namespace tally::cli {

struct SamplingOptions {
  SamplerParams params;
  int64_t seed = -1;  // -1: a random seed per run (llama.cpp's and Ollama's default)

  // Usage errors (exit 2) naming the flag: bounds the ranges cannot say (top-p above 0).
  void validate() const;
  // params with the seed: the one given, or a random one (below 2^63, so that
  // --seed can give it back).
  SamplerParams resolve() const;
};

void add_sampling_options(CLI::App* cmd, SamplingOptions& s);

// A seed from the machine's entropy, below 2^63.
uint64_t random_seed();

}  // namespace tally::cli
