#pragma once
// Sampling flags shared by `run` and `chat`.
#include <CLI/CLI.hpp>

#include "option_checks.h"
#include "sampler/sampler.h"

namespace tally::cli {

inline void add_sampling_options(CLI::App* cmd, SamplerParams& p) {
  cmd->add_option("--temp", p.temperature, "Temperature; 0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", p.top_k, "Keep the K most likely tokens; 0 = off")->capture_default_str();
  cmd->add_option("--top-p", p.top_p, "Keep the smallest set with probability mass P; 1 = off")->capture_default_str();
  cmd->add_option("--min-p", p.min_p, "Drop tokens below P x the top probability; 0 = off")->capture_default_str();
  cmd->add_option("--repeat-penalty", p.repeat_penalty, "Penalty for the last 64 tokens; 1 = off")->capture_default_str();
  cmd->add_option("--presence-penalty", p.presence_penalty,
                  "Subtract P from the logit of every token generated so far; 0 = off")
      ->capture_default_str()
      ->transform(real_in(-2, 2));
  cmd->add_option("--frequency-penalty", p.frequency_penalty,
                  "Subtract F x its count from the logit of every token generated so far; 0 = off")
      ->capture_default_str()
      ->transform(real_in(-2, 2));
  cmd->add_option("--seed", p.seed, "Random seed")->capture_default_str();
}

}  // namespace tally::cli
