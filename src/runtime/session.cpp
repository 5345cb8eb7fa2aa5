#include "runtime/session.h"

#include <algorithm>

#include "core/error.h"

namespace tally {

EngineOptions session_engine_options(const SessionOptions& o) {
  if (o.n_batch < 1) fail("batch size must be at least 1, got {}", o.n_batch);
  EngineOptions e;
  e.n_ctx = o.n_ctx;
  e.block_size = o.block_size;
  e.step_tokens = o.n_batch;
  e.max_sequences = 1;
  e.n_threads = o.n_threads;
  e.threads = o.threads;
  e.cache_type = o.cache_type;
  e.kv_budget = o.kv_budget;
  e.all_logits = o.all_logits;
  e.logit_rows = o.logit_rows;
  e.disk = o.disk;
  return e;
}

Session::Session(const Model& model, const SessionOptions& opts)
    : engine_(std::make_unique<Engine>(model, session_engine_options(opts))), id_(engine_->open()) {}

Session::~Session() = default;

}  // namespace tally
