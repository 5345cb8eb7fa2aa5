#pragma once
// Options shared by every subcommand that runs the model, and the loading
// they imply (model, tokenizer, session settings, with their validation).
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

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
// Sequences one command runs at once (run --parallel, --beam): each holds its
// own sampler, logits row and blocks.
inline constexpr int64_t kMaxParallel = 1024;

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
  std::string cache_dir;          // the prefix cache's disk tier; empty: none
  std::string cache_disk_budget;  // its bytes; empty: kDefaultDiskBudget
  std::string gpu_layers;  // llama.cpp's -ngl: accepted, and a note says tally runs on the CPU

  // Usage errors (exit 2) of these flags together: --scalar with --simd.
  void validate() const;
};

// Which of the shared flags a command takes (a command is never given a flag it ignores).
enum ModelFlags : unsigned {
  kModel = 1,         // -m
  kContext = 2,       // -c (its help text is the command's)
  kThreads = 4,       // -t
  kCache = 8,         // --batch, --cache-type, --kv-budget
  kSimd = 16,         // --scalar, --simd
  kPrefixCache = 32,  // --no-prefix-cache (several sequences)
  kGpuLayers = 64,    // -ngl (llama.cpp's; a note)
  kDiskCache = 128,   // --cache-dir, --cache-disk-budget (the prefix cache's disk tier)
  kRunning = kModel | kContext | kThreads | kCache | kSimd | kGpuLayers,
};

// -m's help: a path, a catalog name or alias, or a file name under
// $TALLY_HOME/models; names the catalog's default model.
std::string model_help();
// The path -m names (io/model_locator.h); prints its note, if any, on stderr.
std::string model_path(const std::string& given);
// The model's name for people and clients: its catalog name when -m named
// one (or the default), else the file name without ".gguf" (a folder's name).
std::string model_name(const std::string& given, const std::string& path);

// ctx_help: what -c means for the command, with its default.
void add_model_options(CLI::App* cmd, ModelOptions& o, unsigned flags = kRunning,
                       const std::string& ctx_help = "Context size in tokens, e.g. 8k (default: min(4096, the "
                                                     "model's trained context))");
void apply_simd_options(const ModelOptions& o);
// The names --simd takes.
std::vector<std::string> simd_names();

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string name;  // model_name()
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

// The Session and Engine these settings make. The engine's refusals (a context
// over the memory budget, a pool that overflows, memory that cannot be had)
// speak of the context, the budget and the cache type; here they also name
// the flags that set them.
std::unique_ptr<Session> open_session(const Model& m, const SessionOptions& so);
std::unique_ptr<Engine> open_engine(const Model& m, const EngineOptions& eo);

}  // namespace tally::cli
