#pragma once
// Options shared by every subcommand that runs the model, and the loading
// they imply (model, tokenizer, session settings, with their validation).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace tally::cli {

struct ModelOptions {
  std::string model;
  int64_t ctx = 0;
  int threads = 0;
  int64_t batch = 512;
  std::string cache_type = "f16";
  uint64_t kv_budget = 0;
  bool scalar = false;
  std::string simd;  // a SimdLevel name; empty: the best this CPU has
  bool no_prefix_cache = false;
};

void add_model_options(CLI::App* cmd, ModelOptions& o);
// --scalar and --simd: the kernels a command uses (fails on a level this CPU lacks).
void add_simd_options(CLI::App* cmd, ModelOptions& o);
void apply_simd_options(const ModelOptions& o);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  double load_ms = 0;
};

// Loads the model and tokenizer; applies --scalar and --simd.
LoadedModel load_model(const ModelOptions& o);
// Session settings from the flags; warns on stderr when -c exceeds the trained context.
SessionOptions session_options(const ModelOptions& o, const Model& m, bool all_logits);
// The same settings for an Engine of many sequences (-c is then the pool's size).
EngineOptions engine_options(const ModelOptions& o, const Model& m);

}  // namespace tally::cli
