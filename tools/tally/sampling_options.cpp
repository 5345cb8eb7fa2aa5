#include "sampling_options.h"

#include <climits>
#include <random>

#include "option_checks.h"
#include "usage.h"

namespace tally::cli {

void add_sampling_options(CLI::App* cmd, SamplingOptions& s) {
  SamplerParams& p = s.params;
  cmd->add_option("--temp", p.temperature, "Temperature; 0 = greedy")->capture_default_str()->transform(real_in(0, 100));
  cmd->add_option("--top-k", p.top_k, "Keep the K most likely tokens; 0 = off")
      ->capture_default_str()
      ->transform(integer_in(0, INT32_MAX));
  cmd->add_option("--top-p", p.top_p, "Keep the smallest set with probability mass P; 1 = off")
      ->capture_default_str()
      ->transform(real_in(0, 1));
  cmd->add_option("--min-p", p.min_p, "Drop tokens below P x the top probability; 0 = off")
      ->capture_default_str()
      ->transform(real_in(0, 1));
  cmd->add_option("--repeat-penalty", p.repeat_penalty, "Penalty for the last 64 tokens; 1 = off")
      ->capture_default_str()
      ->transform(real_in(0, 100));
  cmd->add_option("--presence-penalty", p.presence_penalty,
                  "Subtract P from the logit of every token generated so far; 0 = off")
      ->capture_default_str()
      ->transform(real_in(-2, 2));
  cmd->add_option("--frequency-penalty", p.frequency_penalty,
                  "Subtract F x its count from the logit of every token generated so far; 0 = off")
      ->capture_default_str()
      ->transform(real_in(-2, 2));
  cmd->add_option("-s,--seed", s.seed, "Random seed; -1 = a random one each run (printed with -v and in --json)")
      ->capture_default_str()
      ->transform(integer_in(-1, INT64_MAX));
}

void SamplingOptions::validate() const {
  if (!(params.top_p > 0)) usage_fail("--top-p must be greater than 0 (1 turns it off), got {}", params.top_p);
  if (!(params.min_p < 1)) usage_fail("--min-p must be below 1 (0 turns it off), got {}", params.min_p);
  if (!(params.repeat_penalty > 0))
    usage_fail("--repeat-penalty must be greater than 0 (1 turns it off), got {}", params.repeat_penalty);
  params.validate();  // what the ranges above leave: nothing, unless they change
}

uint64_t random_seed() {
  std::random_device rd;
  const uint64_t hi = rd(), lo = rd();
  return ((hi << 32) | lo) & (~uint64_t{0} >> 1);
}

SamplerParams SamplingOptions::resolve() const {
  SamplerParams p = params;
  p.seed = seed < 0 ? random_seed() : static_cast<uint64_t>(seed);
  return p;
}

}  // namespace tally::cli
