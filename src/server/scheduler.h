#pragma once
// Continuous batching: one engine thread owns the Engine (model, KV pool,
// forward pass) and steps it for every request at once. Requests join at
// the next step and leave when done; prefill is chunked under the step's
// token budget, so a long prompt never freezes the others' streams; n > 1
// forks the prompt's sequence; the prefix cache is shared by all requests.
//
// HTTP threads submit() jobs and read their events (job.h); only the engine
// thread touches the engine. Admission: a request waits in a FIFO queue
// (at most max_queue; beyond, submit refuses with 429) until the pool can
// hold its prompt and its n sequences fit the running limit. Cancelling a
// job (a client gone) frees its blocks at the next loop turn.
//
// Speculation (prompt lookup, or a draft model, per request or by the
// server's default): a choice pushes its next token with the guesses the
// lookup or the draft proposes, the step verifies them with a row of logits
// each, the choice keeps the ones its generation step takes and truncates the
// rest. Which guesses go into a step is StepGuesses' choice
// (runtime/speculation.h): a step already full of sequences takes only
// guesses almost sure to be kept. A draft model is asked only for the guesses
// the step will take (its own steps cost time), for all drafting choices in
// one batch (DraftBatch: a sequence per choice in the draft's own engine).
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "runtime/generation.h"
#include "runtime/speculation.h"
#include "server/job.h"
#include "server/metrics.h"
#include "tokenizer/tokenizer.h"

namespace tally::server {

enum class Speculation { Off, Lookup, Draft };
// "off", "lookup", "draft": the names of the CLI and of a request's 'speculate'.
const char* speculation_name(Speculation s);

struct SchedulerLimits {
  int64_t max_queue = 64;        // requests waiting for admission (>= 1: every request waits there first)
  int64_t max_sequences = 8;     // sequences running at once (--parallel)
  int64_t max_tokens = 2048;     // cap on a request's max_tokens
  // >= 0: a sequence that fills its context slides (StreamingLLM, Engine::slide),
  // keeping this many first tokens, instead of ending; only max_tokens ends it.
  int64_t sinks = -1;
  // Speculation: how a request that does not say speculates, and the most
  // guesses one step verifies for a sequence.
  Speculation speculate = Speculation::Off;
  int64_t draft_max = 8;
  int64_t draft_vocab = kDefaultDraftVocab;  // a draft model guesses from these first ids and the history's (0: all)
};

// Embeddings of one request's inputs, computed by the engine thread (one
// input per loop turn, between steps) on the engine's threads. Thread-safe.
class EmbeddingJob {
 public:
  explicit EmbeddingJob(std::vector<std::vector<int32_t>> inputs) : inputs_(std::move(inputs)) {}
  // Waits until every input is embedded; the pooled, unnormalized vectors in input order.
  // Throws ApiError 503 when the server stopped before it was done.
  std::vector<std::vector<float>> wait();

 private:
  friend class Scheduler;
  std::vector<std::vector<int32_t>> inputs_;
  std::vector<std::vector<float>> out_;  // engine thread until done
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false, failed_ = false;
};

class Scheduler {
 public:
  // draft: the draft model requests may speculate with (its vocabulary the
  // target's, checked by the caller); null: none. Its engine has the
  // target's options, within what is left of the KV budget. Not owned.
  Scheduler(const Model& model, const Tokenizer& tok, const EngineOptions& eo, const SchedulerLimits& limits,
            Metrics& metrics, const Model* draft = nullptr);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. ApiError 400 when it can never fit the context, 429
  // (Retry-After) when the queue is full, 503 while draining.
  std::shared_ptr<Job> submit(GenerationRequest r);
  // Queues embeddings (mean-pooled last hidden states): 429 and 503 as submit().
  std::shared_ptr<EmbeddingJob> submit_embeddings(std::vector<std::vector<int32_t>> inputs);
  // Stops admitting (new submits get 503); running and queued jobs go on.
  void begin_drain();
  // Waits until nothing is queued or running, at most `timeout`; true if idle.
  bool wait_idle(std::chrono::milliseconds timeout);
  // Ends every queued and running job now (finish_reason "cancelled"): the
  // end of a drain that ran out of time.
  void cancel_all();

  EngineGauges gauges() const;
  // One request's context: the pool's size, at most the model's trained context.
  int64_t n_ctx() const { return n_ctx_; }
  int64_t max_tokens() const { return limits_.max_tokens; }

 private:
  struct Choice;
  struct Running;
  void loop();
  bool try_admit(const std::shared_ptr<Job>& job);
  void advance(Running& r);  // samples every ready choice of r
  void push_next();          // pushes every choice's next token, with the guesses this step takes
  // How the request speculates: its 'speculate', else the server's default.
  Speculation speculation(const GenerationRequest& r) const;
  bool embed_one();          // the next input of the oldest embedding job; false when none waits
  void emit(Running& r, Choice& c, const Emission& em);
  void finish_choice(Running& r, Choice& c, Finish why);
  void publish();

  const Model& model_;
  const Tokenizer& tok_;
  SchedulerLimits limits_;
  Metrics& metrics_;
  Engine engine_;  // engine thread only
  int64_t n_ctx_;
  std::vector<std::unique_ptr<Running>> running_;  // engine thread only
  int64_t running_sequences_ = 0;                  // engine thread only
  StepGuesses step_guesses_;                       // engine thread only
  const Model* draft_model_;
  std::unique_ptr<DraftBatch> draft_;              // engine thread only; null without a draft model
  bool told_disk_errors_ = false;                  // engine thread only: the first failed disk write was logged

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::deque<std::shared_ptr<EmbeddingJob>> embed_queue_;
  bool stop_ = false, draining_ = false, cancel_all_ = false;
  EngineGauges gauges_;
  uint64_t next_id_ = 0;
  std::thread thread_;
};

}  // namespace tally::server
