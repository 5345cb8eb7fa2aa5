#pragma once
// Picks the next token from logits: the logit biases, repetition, presence
// and frequency penalties, then greedy (temp 0)
// or temperature + top-k + top-p + min-p and a seeded draw. Same seed, same
// logits, same history -> same token. Logits that hold NaN, or leave no
// token with a finite logit, are an error: a token picked from them would be
// an arbitrary one. Owns its scratch; not thread-safe.
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "sampler/rng.h"

namespace tally {

struct SamplerParams {
  float temperature = 0.8f;  // 0: greedy
  int32_t top_k = 40;        // 0: off
  float top_p = 0.95f;       // 1: off
  float min_p = 0.05f;       // 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int32_t repeat_last_n = 64;
  // OpenAI's penalties over the generated tokens: logit -= frequency * count + presence * (count > 0).
  float presence_penalty = 0.0f;   // 0: off; [-2, 2]
  float frequency_penalty = 0.0f;  // 0: off; [-2, 2]
  uint64_t seed = 0;
  // Added to a token's logit before anything else (OpenAI's logit_bias);
  // -infinity bans the token. An id past the logits has no logit to bias
  // (callers check ids against their vocabulary).
  std::vector<std::pair<int32_t, float>> logit_bias;

  void validate() const;  // throws tally::Error naming the bad parameter
};

class Sampler {
 public:
  // A token the sampler may draw and its probability.
  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };

  explicit Sampler(const SamplerParams& p);
  // history: tokens seen so far (prompt and generated), for the repetition
  // penalty; the last `generated` of them were generated (presence and frequency penalties).
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history, size_t generated = 0);
  // What sample() draws from, split in two: the candidates after every
  // processor (penalties, temperature, top-k, top-p, min-p) with their
  // probabilities (not normalized after the cuts; greedy: the argmax alone,
  // p = 1), valid until the next call; and the draw, which takes from the
  // seeded stream exactly what sample() takes. sample() == draw(distribution()).
  std::span<const Candidate> distribution(std::span<const float> logits, std::span<const int32_t> history,
                                          size_t generated = 0);
  int32_t draw(std::span<const Candidate> dist);
  // A uniform number in [0, 1) from the same seeded stream (speculative decoding's accept test).
  double uniform() { return rng_.uniform(); }
  bool greedy() const { return p_.temperature <= 0; }

 private:
  SamplerParams p_;
  Rng rng_;
  std::vector<Candidate> cand_;
  std::vector<float> adjusted_;
};

// Index of the largest value (the first one on ties).
int32_t argmax(std::span<const float> logits);

// log-softmax of logits, in double: what beam search adds up and logprobs report.
void log_softmax(std::span<const float> logits, std::vector<double>& out);
// The k largest of `lp` as (index, value), largest first (ties: lower index first).
std::vector<std::pair<int32_t, double>> top_entries(const std::vector<double>& lp, size_t k);

}  // namespace tally
