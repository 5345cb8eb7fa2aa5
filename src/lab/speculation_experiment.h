#pragma once
// Speculative decoding, measured: a held set of tasks (code edits that repeat
// much of their prompt, open chat that does not) generated greedily without
// speculation and with k guesses per step (fixed k, and the adaptive length),
// from prompt lookup or a draft model. Every run must write the tokens of the
// run without; the report gives, per kind of task and k, the acceptance, the
// tokens per target step, the decode speed against the run without, and what
// the rollbacks cost the cache (positions written then discarded, blocks
// they touched).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace tally {

struct SpeculationTask {
  std::string name;
  std::string kind;    // "code-edit" or "chat"
  std::string prompt;  // the user's message
};

// The held tasks (bench/speculative_tasks.json, compiled in): code edits on
// a function given in the prompt (rename, add a parameter, fix a bug, add
// docstrings) and open chat prompts.
const std::vector<SpeculationTask>& speculation_tasks();

struct SpeculationPoint {
  std::string kind;
  int64_t k = 0;  // guesses per step; 0: no speculation; -1: the adaptive length (at most the largest k)
  int64_t tokens = 0, steps = 0;  // decoded tokens and target steps, over the kind's tasks
  int64_t drafted = 0, accepted = 0, rolled_back = 0, rolled_back_blocks = 0, draft_rolled_back = 0;
  double decode_ms = 0;
  bool same_tokens = true;  // every task wrote the tokens of its run without speculation
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0; }
  double tokens_per_step() const { return steps > 0 ? static_cast<double>(tokens) / static_cast<double>(steps) : 0; }
  double tps() const { return decode_ms > 0 ? static_cast<double>(tokens) * 1000.0 / decode_ms : 0; }
};

struct SpeculationReport {
  std::string source;  // "lookup" or "draft"
  int64_t gen_tokens = 0;
  std::vector<SpeculationPoint> points;  // per kind: k = 0 first, then each k, then the adaptive one
  // The decode speed of `p` against its kind's run without speculation.
  double speedup(const SpeculationPoint& p) const;
};

struct SpeculationExperiment {
  std::vector<std::string> kinds;  // of speculation_tasks()
  std::vector<int64_t> ks;         // fixed guesses per step, each >= 1
  int64_t gen_tokens = 128;
  int n_threads = 0;
  DType cache_type = DType::F16;
  const Model* draft = nullptr;  // guesses from this model (its vocabulary checked by the caller); null: lookup
  int64_t draft_vocab = 0;       // ... from these first ids and the history's (DraftModel; 0: all)
};

// progress(done, total) after each run.
SpeculationReport measure_speculation(const Model& model, const Tokenizer& tok, const SpeculationExperiment& e,
                                      const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace tally
