#pragma once
// One conversation with a model: a view over one sequence of an Engine
// (runtime/engine.h), evaluated alone and at once. Invariant: tokens().size()
// == cache length; position p of the cache holds tokens()[p]. append()
// prefills in chunks of n_batch (each chunk reads the cache written by the
// ones before); truncate() rolls the cache back for an edit; reuse_prefix()
// keeps what a resent conversation has in common with the cache. The cache
// and the forward pass stay inside the engine: nothing outside can write a
// position the tokens do not account for.
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace tally {

struct SessionOptions {
  int64_t n_ctx = 0;         // 0: min(4096, the model's trained context)
  int64_t n_batch = kDefaultBatchTokens;  // prefill chunk
  int n_threads = 0;         // 0: all cores
  std::shared_ptr<ThreadPool> threads;  // EngineOptions::threads (a draft's session: its target's)
  DType cache_type = DType::F16;
  int64_t block_size = kDefaultBlockSize;
  uint64_t kv_budget = 0;    // 0: the machine's available memory
  bool all_logits = false;   // allow every position's logits (perplexity, logits)
  int64_t logit_rows = 0;    // otherwise: the most positions whose logits one append returns (speculation: k + 1)
  KvDiskOptions disk;        // the prefix cache's disk tier; dir empty: none
};

// The options of the one-sequence engine a Session owns.
EngineOptions session_engine_options(const SessionOptions& o);

class Session {
 public:
  using LogitsSink = Engine::LogitsSink;

  // A session on an engine of its own, holding one sequence.
  Session(const Model& model, const SessionOptions& opts);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Evaluates `tokens` at positions [length, length + n). Returns the logits of
  // the last token (n_vocab values). With sink set, every position's logits go
  // to it. guesses: the last tokens are a draft's (Engine::eval).
  std::span<const float> append(std::span<const int32_t> tokens, const LogitsSink& sink = {}, int64_t guesses = 0) {
    return engine_->eval(id_, tokens, sink, guesses);
  }
  // Forgets positions [n, length) (Engine::truncate).
  void truncate(int64_t n) { engine_->truncate(id_, n); }
  // For a conversation resent whole with a new turn: keeps the longest prefix
  // the cache holds, never all of it, and returns how many positions were
  // kept; the caller then appends tokens[kept..] (Engine::reuse_prefix).
  int64_t reuse_prefix(std::span<const int32_t> tokens) { return engine_->reuse_prefix(id_, tokens); }
  // Of the positions the last reuse_prefix() kept, those loaded from the disk tier.
  int64_t disk_tokens() const { return engine_->disk_tokens(id_); }

  const std::vector<int32_t>& tokens() const { return engine_->tokens(id_); }
  int64_t length() const { return static_cast<int64_t>(tokens().size()); }
  int64_t n_ctx() const { return engine_->n_ctx(); }
  const Model& model() const { return engine_->model(); }
  // The final-normed hidden states (rows, n_embd) of the last chunk evaluated.
  const float* hidden() const { return engine_->hidden(); }
  // Position pos's K and V in `layer`, read back from the cache as f32
  // (n_kv_head * head_dim each). PRECONDITION: pos < length().
  void read_kv(int64_t layer, int64_t pos, float* k, float* v) const { engine_->read_kv(id_, layer, pos, k, v); }
  // The cache, read-only (its length and blocks, for tests and the lab).
  const KvCache& cache() const { return engine_->cache(); }
  KvCache::SeqId sequence() const { return engine_->kv(id_); }
  // A window sliding past the context (Engine::slide).
  int64_t slide(int64_t need, int64_t sinks) { return engine_->slide(id_, need, sinks); }
  void check_window(int64_t sinks) const { engine_->check_window(id_, sinks); }
  // Saves / loads the session (Engine::save, Engine::load).
  void save(const std::string& path, const std::string& meta = "",
            const std::function<void(uint32_t)>& after_layer = {}) const {
    engine_->save(id_, path, meta, after_layer);
  }
  std::string load(const std::string& path) { return engine_->load(id_, path); }
  // An observer of the forward pass (the lab); nullptr for none. Not owned.
  void set_hooks(ForwardHooks* hooks) { engine_->set_hooks(hooks); }
  Engine& engine() { return *engine_; }
  const Engine& engine() const { return *engine_; }

 private:
  std::unique_ptr<Engine> engine_;
  Engine::Id id_;
};

}  // namespace tally
