#pragma once
// One conversation with a model: a thread pool, a KV cache holding one
// sequence, a forward pass, and the tokens the cache holds. Invariant:
// tokens().size() == cache length; position p of the cache holds tokens()[p].
// append() prefills in chunks of n_batch (each chunk reads the cache written
// by the ones before); truncate() rolls the cache back for an edit;
// reuse_prefix() keeps what a resent conversation has in common with the
// cache. The cache and the forward pass stay inside: nothing outside can
// write a position the tokens do not account for.
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kv/kv_cache.h"
#include "model/forward.h"
#include "model/model.h"
#include "core/thread_pool.h"

namespace tally {

struct SessionOptions {
  int64_t n_ctx = 0;         // 0: min(4096, the model's trained context)
  int64_t n_batch = kDefaultBatchTokens;  // prefill chunk
  int n_threads = 0;         // 0: all cores
  DType cache_type = DType::F16;
  int64_t block_size = kDefaultBlockSize;
  uint64_t kv_budget = 0;    // 0: the machine's available memory
  bool all_logits = false;   // allow LogitsMode::All (perplexity, logits)
};

class Session {
 public:
  // Called with (first position, logits rows (rows, n_vocab), rows) for each chunk.
  using LogitsSink = std::function<void(int64_t pos, const float* logits, int64_t rows)>;

  Session(const Model& model, const SessionOptions& opts);

  // Evaluates `tokens` at positions [length, length + n). Returns the logits of
  // the last token (n_vocab values). With sink set, every position's logits go to it.
  std::span<const float> append(std::span<const int32_t> tokens, const LogitsSink& sink = {});
  // Forgets positions [n, length). When the sliding-window layers no longer
  // hold the window before n, it goes back to where they do and evaluates
  // the tokens up to n again.
  void truncate(int64_t n);
  // For a conversation resent whole with a new turn: keeps the longest
  // prefix of `tokens` the cache already holds, but never all of them (the
  // last token must be evaluated again for fresh logits), drops the rest of
  // the cache and returns how many positions were kept. The caller then
  // appends tokens[kept..].
  int64_t reuse_prefix(std::span<const int32_t> tokens);

  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t length() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t n_ctx() const { return cache_.n_ctx(); }
  const Model& model() const { return model_; }
  // The final-normed hidden states (rows, n_embd) of the last chunk evaluated.
  const float* hidden() const { return forward_.hidden(); }
  // Position pos's K and V in `layer`, read back from the cache as f32
  // (n_kv_head * head_dim each). PRECONDITION: pos < length().
  void read_kv(int64_t layer, int64_t pos, float* k, float* v) const { cache_.load(layer, seq_, pos, k, v); }
  // The cache, read-only (its length and blocks, for tests and the lab).
  const KvCache& cache() const { return cache_; }
  KvCache::SeqId sequence() const { return seq_; }
  // A window sliding past the context (StreamingLLM): drops the oldest
  // positions after the first `sinks`, a block of positions at a time, until
  // `need` more positions fit, and re-rotates the kept keys to their new
  // positions (RoPE rotations compose, so a key at p moved to p - n is rotated
  // by -n). Returns the positions dropped. The first `sinks` tokens stay
  // forever: attention parks its excess weight on them.
  int64_t slide(int64_t need, int64_t sinks);
  // Refuses (naming the window and the sinks) a window that cannot keep `sinks`
  // first tokens, drop a block and take a new token: checked before a stream
  // starts, not only when its first slide comes.
  void check_window(int64_t sinks) const;
  // Saves the positions the cache holds, their tokens and `meta` (io/session_file.h),
  // atomically. after_layer: see write_session_file.
  void save(const std::string& path, const std::string& meta = "",
            const std::function<void(uint32_t)>& after_layer = {}) const;
  // Replaces this session's positions with a saved session's and returns its
  // meta. Refuses, naming the reason, a file of another model or cache type,
  // one longer than this context, a corrupted or truncated file, a newer format.
  std::string load(const std::string& path);
  // An observer of the forward pass (the lab); nullptr for none. Not owned.
  void set_hooks(ForwardHooks* hooks) { forward_.set_hooks(hooks); }

 private:
  const Model& model_;
  SessionOptions opts_;
  std::unique_ptr<ThreadPool> pool_;
  KvCache cache_;
  KvCache::SeqId seq_;
  Forward forward_;
  std::vector<int32_t> tokens_;
};

// The context size a session gets for a requested n_ctx (0 = default).
int64_t effective_context(const Model& model, int64_t requested);
// Sets the sliding-window fields of a cache's options for `model`: its window
// layers keep only their window (none for a model without).
void set_cache_window(const Model& model, KvCacheOptions& o);

}  // namespace tally
