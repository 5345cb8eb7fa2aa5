#pragma once
// A Hugging Face config.json, the one reader of it: the HF folder loader
// (hf_folder.h) and the cache planner (sizing/hf_config.h) both read through
// it. Fields come from the section that describes the decoder: its
// "text_config" when present (a vision-language model's), else the top
// level; dtype, tying and model_type fall back to the top level, where
// transformers keeps them. Untrusted input: every error names the file and
// the field's full path. Invariant: the config is a JSON object (the
// constructor throws otherwise); the fields refer into the owned document, so
// an HfConfig is neither copied nor moved.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/json_input.h"

namespace tally {

// The layers of a sliding-window pattern with period P: every P-th layer
// global, the others sliding (P 0: every layer sliding), as transformers
// expands sliding_window_pattern and llama.cpp a scalar
// <arch>.attention.sliding_window_pattern.
std::vector<bool> window_layers_of_period(int64_t n_layer, int64_t period);

class HfConfig {
 public:
  HfConfig(const std::string& text, const std::string& source);
  HfConfig(const HfConfig&) = delete;
  HfConfig& operator=(const HfConfig&) = delete;

  const JsonFields& section() const { return sec_; }
  const JsonFields& top() const { return top_; }
  const std::string& source() const { return top_.source(); }
  const std::string& prefix() const { return sec_.prefix(); }
  bool nested() const { return !sec_.prefix().empty(); }

  // A size in the section, 1 to 2^31 (no real model is larger).
  std::optional<int64_t> get_int(const char* key) const;
  int64_t require_int(const char* key, const char* needed_for) const;
  // The section's value, else the top level's.
  std::optional<std::string> get_string_either(const char* key) const;
  std::optional<bool> get_bool_either(const char* key) const;
  // The weights' dtype name: torch_dtype or dtype, in the section first.
  std::optional<std::string> weights_dtype() const;
  // Which of n_layer layers attend through a sliding window, as the config
  // lists them: "layer_types" ("sliding_attention" or "full_attention" per
  // layer), else "sliding_window_pattern" (or "_sliding_window_pattern") P,
  // every P-th layer global, as transformers expands it. nullopt when it
  // names neither. Throws on a list of another length or another layer type.
  std::optional<std::vector<bool>> window_layers(int64_t n_layer) const;

 private:
  nlohmann::json doc_;
  JsonFields top_, sec_;
};

}  // namespace tally
