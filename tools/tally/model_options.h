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

// Bounds of the shared flags. Threads: creating thousands of threads fails or
// crawls; a batch is a prefill chunk whose buffers grow with it (by the
// vocabulary when every position's logits are kept): 8192 tokens of a 50k
// vocabulary are 1.6 GB of logits already.
inline constexpr int64_t kMaxThreads = 1024;
inline constexpr int64_t kMaxBatch = 8192;

struct ModelOptions {
  std::string model;
  int64_t ctx = 0;
  int threads = 0;
  int64_t batch = 512;
  std::string cache_type = "f16";
  std::string kv_budget;  // BYTES or e.g. 2GiB; empty: the machine's available memory
  bool scalar = false;
  std::string simd;  // a SimdLevel name; empty: the best this CPU has
  bool no_prefix_cache = false;
};

// -m's help: a path, a catalog name or alias, or a file name under
// $TALLY_HOME/models; names the catalog's default model.
std::string model_help();
// The path -m names (io/model_locator.h); prints its note, if any, on stderr.
std::string model_path(const std::string& given);

void add_model_options(CLI::App* cmd, ModelOptions& o);
// --scalar and --simd: the kernels a command uses (fails on a level this CPU lacks).
void add_simd_options(CLI::App* cmd, ModelOptions& o);
void apply_simd_options(const ModelOptions& o);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  double load_ms = 0;
};

// Loads the model and tokenizer; applies --scalar and --simd; warns when -t
// exceeds this machine's cores. Refuses a tokenizer with fewer tokens than
// the model has rows of logits (ids past its end would have no text).
LoadedModel load_model(const ModelOptions& o);
// Session settings from the flags; warns on stderr when -c exceeds the trained
// context, or --kv-budget the memory this machine has available.
SessionOptions session_options(const ModelOptions& o, const Model& m, bool all_logits);
// The same settings for an Engine of many sequences (-c is then the pool's size).
EngineOptions engine_options(const ModelOptions& o, const Model& m);

}  // namespace tally::cli
