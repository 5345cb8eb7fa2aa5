#pragma once
// Many sequences on one model and one paged KV pool, evaluated together step
// by step: the core that continuous batching, parallel sampling, beam search
// and the server drive. The caller owns the policy (what to sample, when to
// stop); the engine owns the cache, the forward pass and the schedule.
//
// A sequence is a list of tokens of which the first `evaluated` are in the
// cache and the rest are pending. step() evaluates pending tokens: first the
// single next token of every decoding sequence, then prefill chunks of the
// others in admission order, within a token budget per step (so a long
// prompt is split and never stalls the decodes of the rest: chunked
// prefill). A sequence whose pending tokens are all evaluated is ready: its
// logits (of its last token) can be read, a token pushed, it can be forked.
//
// Capacity: admit() refuses a prompt the pool cannot hold now (the caller
// queues or fails it; nothing is taken). A step never fails for lack of
// blocks: it defers prefill chunks, and if decoding sequences still do not
// fit it preempts the most recently admitted ones (their blocks are freed,
// their tokens kept; they are evaluated again from the prefix cache when the
// pool has room). A sequence that cannot grow even alone is stopped
// (stopped()). Invariants: a live id names one sequence for its life; every
// block of the pool is held by a live sequence, cached, or free.
// One thread drives an Engine (not thread-safe).
#include <cstdint>
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
  int64_t block_size = 16;     // positions per KV block
  int64_t step_tokens = 512;   // token budget of one step
  int64_t max_sequences = 64;  // sequences evaluated in one step
  int n_threads = 0;           // 0: all cores
  DType cache_type = DType::F16;
  uint64_t kv_budget = 0;      // 0: the machine's available memory
  bool prefix_cache = true;
};

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
    std::string refusal;       // why, when refused
  };
  struct Counters {
    uint64_t steps = 0, tokens = 0, preemptions = 0;
  };

  Engine(const Model& model, const EngineOptions& opts);

  // A new sequence starting with `prompt` (1 or more tokens), of at most
  // max_len positions (0: the pool's size). Takes the cached blocks of the
  // prompt's longest cached prefix (never its last token: that one's logits
  // are needed); the rest is pending.
  Admission admit(std::span<const int32_t> prompt, int64_t max_len = 0);
  // True when a prompt of n tokens would be admitted now.
  bool can_admit(int64_t n_tokens) const;
  // A new sequence sharing every block of a ready src (same tokens, same logits).
  Id fork(Id src);
  // The same, every block copied (the baseline that sharing is measured against).
  Id fork_copy(Id src);
  // Appends a token to a ready sequence, to be evaluated by the next step.
  void push(Id id, int32_t token);
  // Evaluates pending tokens (see above); returns the sequences that became ready.
  std::span<const Id> step();
  // Frees the sequence's blocks at once (a finished or cancelled sequence).
  void release(Id id);

  bool ready(Id id) const;
  bool stopped(Id id) const;  // cannot grow: its maximum, or the whole pool, is reached
  // The logits of the last token. PRECONDITION: ready(id).
  std::span<const float> logits(Id id) const;
  const std::vector<int32_t>& tokens(Id id) const;
  int64_t cached_tokens(Id id) const;  // how many of its prompt came from the prefix cache
  // Positions it may still grow by.
  int64_t room(Id id) const;

  int64_t running() const;  // live sequences
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
    uint64_t order = 0;      // admission order
    bool stopped = false;
    std::vector<float> logits;  // of tokens.back(), when ready
  };
  Seq& get(Id id);
  const Seq& get(Id id) const;
  Id new_slot();
  const Seq& ready_seq(Id id) const;       // get(id), refusing a sequence with tokens still to evaluate
  Id adopt(Id src, KvCache::SeqId kv);     // a new sequence holding kv, with src's tokens and logits
  int64_t committed_blocks() const;  // what pending and preempted tokens will take
  bool resume(Seq& s);  // a preempted sequence back into the cache from its prefix
  void preempt(Seq& s);

  const Model& model_;
  std::unique_ptr<ThreadPool> pool_;
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
