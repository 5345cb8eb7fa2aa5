#pragma once
// Many sequences on one model and one paged KV pool: the one runtime. The
// engine owns the cache and the forward pass, and runs on a thread pool of
// its own or on one it shares (a draft model's engine uses its target's
// threads: the two step in turn, never at once, and two pools would ask the
// cores for twice their threads, whose idle spinning slows the other's
// steps); continuous batching, parallel sampling, beam search and the
// server drive its step(), and a one-sequence Session (runtime/session.h)
// is a view over it that evaluates its sequence alone (eval()). The caller
// owns the policy (what to sample, when to stop); the engine owns the cache,
// the forward pass and the schedule.
//
// A sequence is a list of tokens of which the first `evaluated` are in the
// cache and the rest are pending. step() evaluates pending tokens: first the
// single next token of every decoding sequence, then prefill chunks of the
// others in admission order, within a token budget per step (so a long
// prompt is split and never stalls the decodes of the rest: chunked
// prefill). A sequence whose pending tokens are all evaluated is ready: its
// logits (of its last token) can be read, a token pushed, it can be forked.
//
// Reuse of earlier work goes through one place: a new sequence (admit())
// starts from the longest prefix the prefix cache holds (the hash-chained
// blocks of every sequence so far); a sequence resent with an edit
// (reuse_prefix(), a chat's next turn) keeps its own common prefix or takes
// the cache's, whichever is longer.
//
// Capacity: admit() refuses a prompt the pool cannot hold now (the caller
// queues or fails it; nothing is taken). A step never fails for lack of
// blocks: it defers prefill chunks, and if decoding sequences still do not
// fit it preempts the most recently admitted ones (their blocks are freed,
// their tokens kept; they are evaluated again from the prefix cache when the
// pool has room). A sequence that cannot grow even alone is stopped
// (stopped()). Invariants: a live id names one sequence for its life; every
// block of the pool is held by a live sequence, cached, or free; a
// sequence's first `evaluated` tokens are exactly its cache positions.
// One thread drives an Engine (not thread-safe).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "model/model.h"

namespace tally {

struct EngineOptions {
  int64_t n_ctx = 0;           // positions in the pool (0: min(4096, the model's trained context))
  int64_t block_size = kDefaultBlockSize;  // positions per KV block
  int64_t step_tokens = kDefaultBatchTokens;  // token budget of one step (a lone sequence's prefill chunk)
  int64_t max_sequences = 64;  // sequences evaluated in one step
  int n_threads = 0;           // 0: all cores
  // Another engine's threads (Engine::shared_threads()), when the thread that
  // drives this engine drives that one too; null: a pool of n_threads.
  std::shared_ptr<ThreadPool> threads;
  DType cache_type = DType::F16;
  uint64_t kv_budget = 0;      // 0: the machine's available memory
  bool prefix_cache = true;
  bool all_logits = false;     // eval() may return every position's logits (perplexity, logits)
  int64_t logit_rows = 0;      // without all_logits: the most positions eval() returns logits of
                               // at once (speculation verifies k + 1); 0: one per sequence of a step
  KvDiskOptions disk;          // the prefix cache's disk tier (kv/kv_disk.h); dir empty: none
};

// The context size an engine gets for a requested n_ctx (0 = default).
int64_t effective_context(const Model& model, int64_t requested);

class Engine {
 public:
  struct Id {
    int32_t slot = -1;
    uint32_t gen = 0;
    bool operator==(const Id&) const = default;
  };
  struct Admission {
    std::optional<Id> id;      // empty when refused
    int64_t cached_tokens = 0; // prompt positions taken from the prefix cache
    int64_t disk_tokens = 0;   // of those, the ones loaded from its disk tier
    std::string refusal;       // why, when refused
  };
  struct Counters {
    uint64_t steps = 0, tokens = 0, preemptions = 0;
  };

  // Called with (first position, logits rows (rows, n_vocab), rows) for each chunk eval() evaluates.
  using LogitsSink = std::function<void(int64_t pos, const float* logits, int64_t rows)>;

  Engine(const Model& model, const EngineOptions& opts);

  // A new sequence starting with `prompt` (1 or more tokens), of at most
  // max_len positions (0: the pool's size). Takes the cached blocks of the
  // prompt's longest cached prefix (never its last token: that one's logits
  // are needed); the rest is pending.
  Admission admit(std::span<const int32_t> prompt, int64_t max_len = 0);
  // True when a prompt of n tokens would be admitted now.
  bool can_admit(int64_t n_tokens) const;
  // Refuses (tally::Error naming `what`) `n` sequences forked from one prompt
  // of `prompt` tokens that may each grow by `max_tokens`, when the whole
  // pool could never hold them at once (the prompt's full blocks shared, each
  // one's own blocks from there on): checked before
  // they start, since a step that can never fit them would preempt and
  // re-evaluate them forever.
  void check_fits(int64_t n, int64_t prompt, int64_t max_tokens, const char* what) const;
  // A new sequence sharing every block of a ready src (same tokens, same logits).
  Id fork(Id src);
  // The same, every block copied (the baseline that sharing is measured against).
  Id fork_copy(Id src);
  // Appends a token to a ready sequence (or one truncate()d since), to be evaluated by the next step.
  void push(Id id, int32_t token);
  // The same with a draft's guesses after the token (speculative decoding):
  // the next step evaluates them with it as one decode and keeps a row of
  // logits for each (guess_logits()). A step with no rows or blocks to spare
  // drops guesses from the end (all of them when the sequence is preempted);
  // the blocks they fill are keyed in the prefix cache only once a later
  // write follows them. The caller then truncate()s the rejected ones.
  void push(Id id, int32_t token, std::span<const int32_t> guesses);
  // Evaluates pending tokens (see above); returns the sequences that became ready.
  std::span<const Id> step();
  // Frees the sequence's blocks at once (a finished or cancelled sequence).
  void release(Id id);

  // --- A sequence evaluated alone, now (what a Session does) ---
  // A new empty sequence of at most max_len positions (0: the pool's size).
  Id open(int64_t max_len = 0);
  // Evaluates `tokens` after the sequence's last position, in chunks of the
  // step budget (each reads what the ones before wrote), and returns the last
  // token's logits (valid until the engine evaluates again). With sink, every
  // position's logits go to it (needs all_logits). All or nothing: a bad
  // token or a context overflow is refused before anything is written.
  // PRECONDITION: no tokens pending.
  // guesses: the last tokens are a draft's (their blocks are keyed only once followed).
  std::span<const float> eval(Id id, std::span<const int32_t> tokens, const LogitsSink& sink = {},
                              int64_t guesses = 0);
  // Forgets positions [n, length). When the sliding-window layers no longer
  // hold the window before n, it goes back to where they do and evaluates the
  // tokens up to n again.
  void truncate(Id id, int64_t n);
  // For a sequence resent whole with an edit (a chat's next turn): keeps the
  // longest prefix of `tokens` that the cache holds (in this sequence, or in
  // the prefix cache's blocks when that is longer), never all of them (the
  // last token must be evaluated again for fresh logits), drops the rest and
  // returns how many positions were kept. The caller evaluates tokens[kept..].
  int64_t reuse_prefix(Id id, std::span<const int32_t> tokens);
  // A window sliding past the context (StreamingLLM): drops the oldest
  // positions after the first `sinks`, a block at a time, until `need` more
  // positions fit, re-rotating the kept keys to their new positions (RoPE
  // rotations compose: a key at p moved to p - n is rotated by -n). Returns
  // the positions dropped.
  int64_t slide(Id id, int64_t need, int64_t sinks);
  // Refuses a window (the sequence's maximum length) that cannot keep `sinks`
  // first tokens, drop a block and take a new token: checked before a stream starts.
  void check_window(Id id, int64_t sinks) const;
  // Saves the sequence's positions, their tokens and `meta` (io/session_file.h), atomically.
  void save(Id id, const std::string& path, const std::string& meta = "",
            const std::function<void(uint32_t)>& after_layer = {}) const;
  // Replaces the sequence's positions with a saved session's and returns its
  // meta. Refuses, naming the reason, a file of another model or cache type,
  // one longer than the sequence may grow, a corrupted or truncated file, a newer format.
  std::string load(Id id, const std::string& path);
  // Position pos's K and V in `layer`, read back as f32 (n_kv_head * head_dim each).
  void read_kv(Id id, int64_t layer, int64_t pos, float* k, float* v) const;
  // The final-normed hidden states (rows, n_embd) of the last evaluation.
  const float* hidden() const { return forward_.hidden(); }
  // An observer of the forward pass (the lab); nullptr for none. Not owned.
  void set_hooks(ForwardHooks* hooks) { forward_.set_hooks(hooks); }
  // Logits of part of the vocabulary only (Forward::limit_logits; a draft model's).
  void limit_logits(int64_t prefix, std::span<const int32_t> also) { forward_.limit_logits(prefix, also); }
  const KvCache& cache() const { return cache_; }
  KvCache::SeqId kv(Id id) const;
  // The engine's threads, for other work of the thread that drives it (the server's embeddings).
  ThreadPool& threads() { return *pool_; }
  // The pool, for an engine driven by the same thread (EngineOptions::threads).
  std::shared_ptr<ThreadPool> shared_threads() const { return pool_; }

  bool ready(Id id) const;
  bool stopped(Id id) const;  // cannot grow: its maximum, or the whole pool, is reached
  // The logits of the last token. PRECONDITION: ready(id).
  std::span<const float> logits(Id id) const;
  // After a step that evaluated a token pushed with guesses: a row for it and
  // for each guess the step kept (rows x n_vocab; the guesses are the last
  // rows - 1 tokens). Otherwise logits(). PRECONDITION: ready(id).
  std::span<const float> guess_logits(Id id) const;
  const std::vector<int32_t>& tokens(Id id) const;
  int64_t cached_tokens(Id id) const;  // how many of its prompt came from the prefix cache
  // Of the positions its admission or last reuse_prefix() took from the
  // prefix cache, those loaded from the disk tier.
  int64_t disk_tokens(Id id) const;
  // Positions it may still grow by.
  int64_t room(Id id) const;

  int64_t running() const;  // live sequences
  // Prompt tokens the next step would prefill (pending tokens of sequences in
  // the cache that are not one decode away), at most one step's budget.
  int64_t prefill_tokens() const;
  int64_t step_tokens() const { return step_tokens_; }
  int64_t logit_rows() const { return forward_.logit_rows(); }  // the most eval() returns at once
  int64_t n_ctx() const { return cache_.n_ctx(); }
  const Model& model() const { return model_; }
  KvCacheStats cache_stats() const { return cache_.stats(); }
  const Counters& counters() const { return counters_; }
  // Bytes of K/V the sequences hold now: blocks in use for the full layers,
  // window slots in use for the sliding-window layers.
  uint64_t held_bytes() const;
  uint64_t block_bytes() const;  // one block as if every layer held it (window layers may not), K and V

 private:
  struct Seq {
    bool live = false;
    uint32_t gen = 0;
    std::optional<KvCache::SeqId> kv;  // none while preempted
    std::vector<int32_t> tokens;
    int64_t evaluated = 0;   // tokens in the cache
    int64_t max_len = 0;
    int64_t cached = 0;      // prompt positions the prefix cache gave at admission
    int64_t from_disk = 0;   // of the last prefix taken (admission, reuse_prefix), those from disk
    uint64_t order = 0;      // admission order
    bool stopped = false;
    int64_t guesses = 0;        // of the pending tokens, the last ones a draft guessed
    std::vector<float> logits;  // when ready: of tokens.back(), or (after guesses) a row per token the step evaluated
    int64_t pending() const { return static_cast<int64_t>(tokens.size()) - evaluated; }
    // One token after its prompt (with its guesses) to evaluate: a step's decode, not a prefill chunk.
    bool decoding() const { return pending() == 1 + guesses && evaluated > 0; }
  };
  Seq& get(Id id);
  const Seq& get(Id id) const;
  Id new_slot();
  const Seq& ready_seq(Id id) const;       // get(id), refusing a sequence with tokens still to evaluate
  Id adopt(Id src, KvCache::SeqId kv);     // a new sequence holding kv, with src's tokens and logits
  int64_t committed_blocks() const;  // what pending and preempted tokens will take
  bool resume(Seq& s);  // a preempted sequence back into the cache from its prefix
  void preempt(Seq& s);
  void drop_guesses(Seq& s, int64_t keep);  // pending guesses past the first `keep` are forgotten

  const Model& model_;
  std::shared_ptr<ThreadPool> pool_;
  KvCache cache_;
  Forward forward_;
  int64_t step_tokens_, max_sequences_;
  std::vector<Seq> seqs_;
  uint64_t next_order_ = 0;
  Counters counters_;
  // Scratch of one step (capacity kept between steps).
  std::vector<StepEntry> entries_;
  std::vector<int32_t> entry_slot_;
  std::vector<Id> ready_;
  std::vector<int32_t> order_;  // live sequences by admission order
};

}  // namespace tally
