#include "server/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

#include "core/byte_size.h"
#include "core/error.h"
#include "kv/kv_disk.h"
#include "runtime/embedder.h"
#include "server/api_error.h"

namespace tally::server {

namespace {
// Rows of logits a step keeps for guesses, beyond one per sequence.
int64_t guess_rows(const SchedulerLimits& l) { return 4 * l.draft_max; }

EngineOptions with_guess_rows(EngineOptions eo, const SchedulerLimits& l) {
  eo.logit_rows = std::max(eo.logit_rows, eo.max_sequences + guess_rows(l));
  return eo;
}

// The draft model's engine: the target's pool size, block size, step budget,
// sequences, threads and cache type; no disk tier (it is the target's); rows
// for catching up two tokens per sequence in a step; what the target's cache
// left of the KV budget.
EngineOptions draft_engine_options(EngineOptions eo, const Engine& target) {
  eo.disk = {};
  eo.logit_rows = 2 * eo.max_sequences;
  eo.threads = target.shared_threads();  // the engine thread steps the two in turn
  if (eo.kv_budget > 0) {
    const uint64_t taken = target.cache().storage().bytes();
    if (taken >= eo.kv_budget)
      fail("the KV cache takes {} of the KV budget of {}, leaving nothing for the draft model's",
           format_bytes_short(taken), format_bytes_short(eo.kv_budget));
    eo.kv_budget -= taken;
  }
  return eo;
}
}  // namespace

const char* speculation_name(Speculation s) {
  switch (s) {
    case Speculation::Lookup: return "lookup";
    case Speculation::Draft: return "draft";
    case Speculation::Off: break;
  }
  return "off";
}

Speculation Scheduler::speculation(const GenerationRequest& r) const {
  if (r.speculate.empty()) return limits_.speculate;
  return r.speculate == "lookup" ? Speculation::Lookup : r.speculate == "draft" ? Speculation::Draft : Speculation::Off;
}

// One choice of a running request: its sequence and its generation step;
// with speculation, its drafts' acceptance, the token it pushes next and the
// guesses pushed with it; with a draft model, its sequence and sampler there.
struct Scheduler::Choice {
  Engine::Id id;
  Generation gen;
  bool done = false;
  Job::Clock::time_point last_token{};
  std::optional<DraftLength> draft;  // speculating: at most draft_max guesses a step
  bool waiting = false;              // gen.next() is to be pushed
  std::vector<Guess> guesses;        // pushed after gen.next(), in order (the engine may drop some from the end)
  std::optional<Engine::Id> draft_seq;  // with the draft model: its sequence there (none until it first guesses)
  std::optional<Sampler> draft_sampler;
  Choice(Engine::Id i, const GenerationParams& p, const Tokenizer& tok, int64_t draft_max, const Model& target,
         const Model* draft_model)
      : id(i), gen(p, &tok) {
    if (draft_max > 0) draft.emplace(draft_length(draft_max, target, draft_model));
    if (draft_max > 0 && draft_model != nullptr) {
      SamplerParams sp = p.sampling;
      sp.seed ^= 0x9e3779b97f4a7c15ULL;  // its own stream: the target's draws stay as they are
      draft_sampler.emplace(sp);
    }
  }
};

struct Scheduler::Running {
  std::shared_ptr<Job> job;
  std::vector<Choice> choices;  // choices[0] holds the prompt; the others are forked once it is evaluated
  bool forked = false;
  GenerationParams params;      // of choice 0; choice i samples with seed + i
  int64_t draft_max = 0;        // guesses per step (0: no speculation)
  const Model* draft = nullptr;  // the draft model it guesses with (null: prompt lookup)
};

Scheduler::Scheduler(const Model& model, const Tokenizer& tok, const EngineOptions& eo, const SchedulerLimits& limits,
                     Metrics& metrics, const Model* draft)
    : model_(model),
      tok_(tok),
      limits_(limits),
      metrics_(metrics),
      engine_(model, with_guess_rows(eo, limits)),
      n_ctx_(std::min(engine_.n_ctx(), model.config().n_ctx_train)),
      draft_model_(draft) {
  // Every request passes through the queue, if only until the engine thread's next turn: 0 would refuse them all.
  if (limits.max_queue < 1) fail("--queue must be at least 1, got {}", limits.max_queue);
  if (limits.max_sequences < 1) fail("--parallel must be at least 1, got {}", limits.max_sequences);
  if (limits.max_tokens < 1) fail("--max-tokens must be at least 1, got {}", limits.max_tokens);
  if (limits.draft_max < 1) fail("--draft-max must be at least 1, got {}", limits.draft_max);
  if (limits.speculate != Speculation::Off && limits.sinks >= 0)
    fail("--speculate rolls back a reply's cache: not with a sliding window (--sinks)");
  if (limits.speculate == Speculation::Draft && draft == nullptr)
    fail("--speculate draft needs the draft model: give --draft NAME|PATH");
  if (draft != nullptr && limits.sinks >= 0)
    fail("a draft model speculates, which rolls back a reply's cache: not with a sliding window (--sinks)");
  if (draft != nullptr) {
    const EngineOptions d = draft_engine_options(eo, engine_);
    try {
      draft_ = std::make_unique<DraftBatch>(*draft, d, limits.draft_vocab);
      draft_->on_step([this](int64_t tokens, double seconds) { step_guesses_.record_draft(tokens, seconds); });
    } catch (const Error& e) {
      fail("the draft model's KV cache of {} positions: {} (raise --kv-budget or lower -c)", d.n_ctx, e.what());
    }
  }
  if (limits.sinks >= 0 && limits.sinks + engine_.cache().block_size() + 1 > n_ctx_)
    fail("--sinks {} leaves no room to slide in a context of {}: it needs at least sinks + {} + 1 positions",
         limits.sinks, n_ctx_, engine_.cache().block_size());
  publish();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Job> Scheduler::submit(GenerationRequest r) {
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  const char* param = r.chat ? "messages" : "prompt";
  if (n + 1 > n_ctx_)
    throw ApiError(400, "invalid_request_error",
                   fmt::format("the prompt has {} tokens and the context holds {}: {} would leave no room for a reply", n,
                               n_ctx_, n),
                   param, "context_length_exceeded");
  if (r.n > limits_.max_sequences)
    bad_request("n", "'n' is {}, more than the {} sequences this server runs at once (--parallel)", r.n,
                limits_.max_sequences);
  if ((r.speculate == "lookup" || r.speculate == "draft") && limits_.sinks >= 0)
    bad_request("speculate", "'speculate' rolls back a reply's cache: this server slides its window (--sinks)");
  if (r.speculate == "draft" && !draft_)
    bad_request("speculate", "'speculate': 'draft' needs a draft model, and this server has none (serve --draft)");
  if (r.draft_max > 0 && speculation(r) == Speculation::Off)
    bad_request("draft_max", "'draft_max' sets the guesses of speculative decoding, which is off for this request: "
                             "give 'speculate': 'lookup' or 'draft' too");
  if (r.draft_max > limits_.draft_max)
    bad_request("draft_max", "'draft_max' is {}, more than the {} guesses this server verifies per step (--draft-max)",
                r.draft_max, limits_.draft_max);
  std::shared_ptr<Job> job;
  {
    std::lock_guard<std::mutex> lock(m_);
    if (draining_) {
      ApiError e(503, "server_error", "the server is shutting down");
      e.retry_after = 5;
      throw e;
    }
    if (static_cast<int64_t>(queue_.size()) >= limits_.max_queue) {
      ApiError e(429, "rate_limit_error",
                 fmt::format("{} requests are already waiting; try again shortly", queue_.size()), "", "queue_full");
      e.retry_after = 1;
      throw e;
    }
    job = std::make_shared<Job>(fmt::format("{:x}{:06x}", static_cast<uint64_t>(std::time(nullptr)), next_id_++),
                                std::move(r));
    queue_.push_back(job);
    gauges_.queue_depth = static_cast<int64_t>(queue_.size());
  }
  cv_.notify_all();
  return job;
}

std::vector<std::vector<float>> EmbeddingJob::wait() {
  std::unique_lock<std::mutex> lock(m_);
  cv_.wait(lock, [&] { return done_; });
  if (failed_) {
    ApiError e(503, "server_error", "the server stopped before the embeddings were done");
    e.retry_after = 5;
    throw e;
  }
  return std::move(out_);
}

std::shared_ptr<EmbeddingJob> Scheduler::submit_embeddings(std::vector<std::vector<int32_t>> inputs) {
  auto job = std::make_shared<EmbeddingJob>(std::move(inputs));
  {
    std::lock_guard<std::mutex> lock(m_);
    if (draining_) {
      ApiError e(503, "server_error", "the server is shutting down");
      e.retry_after = 5;
      throw e;
    }
    if (static_cast<int64_t>(queue_.size() + embed_queue_.size()) >= limits_.max_queue) {
      ApiError e(429, "rate_limit_error",
                 fmt::format("{} requests are already waiting; try again shortly", queue_.size() + embed_queue_.size()),
                 "", "queue_full");
      e.retry_after = 1;
      throw e;
    }
    embed_queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

bool Scheduler::embed_one() {
  std::shared_ptr<EmbeddingJob> job;
  {
    std::lock_guard<std::mutex> lock(m_);
    if (embed_queue_.empty()) return false;
    job = embed_queue_.front();
  }
  const size_t i = job->out_.size();
  const Embedding e = embed(model_, job->inputs_[i], -1, Pooling::Mean, engine_.threads());
  job->out_.push_back(e.values);
  if (job->out_.size() == job->inputs_.size()) {
    {
      std::lock_guard<std::mutex> lock(m_);
      embed_queue_.pop_front();
    }
    std::lock_guard<std::mutex> lock(job->m_);
    job->done_ = true;
    job->cv_.notify_all();
  }
  return true;
}

void Scheduler::begin_drain() {
  std::lock_guard<std::mutex> lock(m_);
  draining_ = true;
}

void Scheduler::cancel_all() {
  {
    std::lock_guard<std::mutex> lock(m_);
    cancel_all_ = true;
    for (auto& job : queue_) job->cancel();
  }
  cv_.notify_all();
}

bool Scheduler::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(m_);
  return cv_.wait_for(lock, timeout,
                      [&] { return queue_.empty() && embed_queue_.empty() && gauges_.running_requests == 0; });
}

EngineGauges Scheduler::gauges() const {
  std::lock_guard<std::mutex> lock(m_);
  return gauges_;
}

void Scheduler::publish() {
  const KvCacheStats s = engine_.cache_stats();
  if (s.disk.write_errors > 0 && !told_disk_errors_) {
    fmt::print(stderr, "tally serve: warning: {}; later ones are counted in tally_kv_disk_write_errors_total\n",
               describe_write_errors(s.disk));
    told_disk_errors_ = true;
  }
  std::lock_guard<std::mutex> lock(m_);
  gauges_.queue_depth = static_cast<int64_t>(queue_.size());
  gauges_.running_requests = static_cast<int64_t>(running_.size());
  gauges_.running_sequences = running_sequences_;
  gauges_.blocks_free = s.blocks_free;
  gauges_.blocks_used = s.blocks_used;
  gauges_.blocks_cached = s.blocks_cached;
  gauges_.prefix_hit_tokens = s.hit_tokens;
  gauges_.prefix_lookups = s.lookups;
  gauges_.evictions = s.evictions;
  gauges_.disk = s.disk;
  gauges_.disk_tier = engine_.cache().disk_tier();
  gauges_.preemptions = engine_.counters().preemptions;
}

bool Scheduler::try_admit(const std::shared_ptr<Job>& job) {
  const GenerationRequest& req = job->request();
  if (running_sequences_ + req.n > limits_.max_sequences) return false;
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  // A sliding window never runs out of context: only the token cap ends a reply.
  const bool sliding = limits_.sinks >= 0;
  const int64_t cap = sliding ? limits_.max_tokens : std::min(limits_.max_tokens, n_ctx_ - n);
  const int64_t max_tokens = req.max_tokens < 0 ? cap : std::min(req.max_tokens, cap);
  const Engine::Admission a = engine_.admit(req.prompt, sliding ? n_ctx_ : std::min(n_ctx_, n + max_tokens));
  if (!a.id) return false;  // the pool cannot hold the prompt now: it waits at the head of the queue
  job->set_cached_tokens(a.cached_tokens, a.disk_tokens);
  auto r = std::make_unique<Running>();
  r->job = job;
  r->params.sampling = req.sampling;
  r->params.sampling.seed = req.seeded ? req.sampling.seed : std::random_device{}() * 0x9e3779b97f4a7c15ull;
  r->params.max_tokens = max_tokens;
  r->params.stop = req.stop;
  r->params.is_stop = [this](int32_t id) { return tok_.is_end_of_generation(id); };
  r->params.top_logprobs = req.logprobs ? req.top_logprobs : -1;
  r->params.constraint = req.constraint;
  const Speculation spec = speculation(req);
  r->draft_max = spec != Speculation::Off ? (req.draft_max > 0 ? req.draft_max : limits_.draft_max) : 0;
  r->draft = spec == Speculation::Draft ? draft_model_ : nullptr;
  r->choices.emplace_back(*a.id, r->params, tok_, r->draft_max, model_, r->draft);
  running_sequences_ += req.n;
  running_.push_back(std::move(r));
  return true;
}

void Scheduler::emit(Running& r, Choice& c, const Emission& em) {
  Event e;
  e.choice = static_cast<int>(&c - r.choices.data());
  e.token = em.token;
  e.text = em.text;
  e.logprob = em.logprob;
  e.top = em.top;
  r.job->push(std::move(e));
}

void Scheduler::finish_choice(Running& r, Choice& c, Finish why) {
  c.gen.end(why);
  // What was held back as a possible stop string's start is text after all.
  if (const auto tail = c.gen.tail()) emit(r, c, *tail);
  Event end;
  end.kind = Event::Kind::End;
  end.choice = static_cast<int>(&c - r.choices.data());
  end.finish_reason = finish_reason(c.gen.finish());
  r.job->push(end);
  engine_.release(c.id);
  if (c.draft_seq) draft_->release(*c.draft_seq);
  c.done = true;
  --running_sequences_;
}

void Scheduler::advance(Running& r) {
  const GenerationRequest& req = r.job->request();
  if (!r.forked) {
    if (!engine_.ready(r.choices[0].id)) return;
    for (int i = 1; i < req.n; ++i) {
      GenerationParams p = r.params;
      p.sampling.seed += static_cast<uint64_t>(i);
      r.choices.emplace_back(engine_.fork(r.choices[0].id), p, tok_, r.draft_max, model_, r.draft);
    }
    r.forked = true;
  }
  const int64_t V = model_.config().n_vocab;
  for (Choice& c : r.choices) {
    if (c.done || !engine_.ready(c.id)) continue;
    const bool sliding = limits_.sinks >= 0;
    // One row of logits, or one for the token pushed and each guess the step
    // verified after it: the guesses are the last rows - 1 tokens.
    const std::span<const float> rows = engine_.guess_logits(c.id);
    const int64_t n_rows = static_cast<int64_t>(rows.size()) / V;
    const std::vector<int32_t>& tokens = engine_.tokens(c.id);
    const int64_t base = static_cast<int64_t>(tokens.size()) - n_rows;  // positions before the first row's token
    int64_t kept = 0;
    for (int64_t j = 0; j < n_rows; ++j) {
      const bool guessed = j + 1 < n_rows;
      const std::span<const float> row = rows.subspan(static_cast<size_t>(j * V), static_cast<size_t>(V));
      const std::span<const int32_t> history(tokens.data(), static_cast<size_t>(base + j + 1));
      // The room after this row's token: the guesses after it are not kept yet.
      const int64_t room = sliding ? std::numeric_limits<int64_t>::max() : engine_.room(c.id) + (n_rows - 1 - j);
      std::optional<Emission> em;
      try {
        em = guessed ? c.gen.step(row, history, room, c.guesses[static_cast<size_t>(j)]) : c.gen.step(row, history, room);
      } catch (const Error& e) {
        // No token could be picked (the model's logits are not finite): this
        // choice ends with finish_reason "error"; the server goes on.
        fmt::print(stderr, "tally serve: {} choice {}: {}\n", r.job->id(), &c - r.choices.data(), e.what());
        c.gen.end(Finish::Failed);
        break;
      }
      if (em) {
        const auto now = Job::Clock::now();
        if (c.gen.generated() > 1) metrics_.inter_token(std::chrono::duration<double>(now - c.last_token).count());
        c.last_token = now;
        emit(r, c, *em);
      }
      if (!guessed || !c.gen.took_guess() || c.gen.finished()) break;
      ++kept;  // the guess is in the cache already
    }
    if (n_rows > 1) {
      c.draft->record(n_rows - 1, kept);
      metrics_.speculation(n_rows - 1, kept);
      if (base + 1 + kept < static_cast<int64_t>(tokens.size())) engine_.truncate(c.id, base + 1 + kept);
    }
    if (c.gen.finished()) {
      finish_choice(r, c, c.gen.finish());
      continue;
    }
    if (sliding && engine_.room(c.id) == 0) engine_.slide(c.id, 1, limits_.sinks);
    c.waiting = true;
  }
}

void Scheduler::push_next() {
  // Each speculating choice's proposal: the lookup's guesses (as many as
  // fit its draft length and its room), or as many as its draft length asks
  // of the draft model; each guess kept with the choice's acceptance rate.
  struct Wanted {
    Choice* c;
    std::vector<int32_t> history;  // its tokens and the next one
    std::vector<int32_t> guesses;  // prompt lookup's (empty with a draft model)
  };
  std::vector<Wanted> wanted;
  std::vector<StepGuesses::Proposal> proposals;
  int64_t other = engine_.prefill_tokens();  // other requests' prompts share the step
  const PromptLookup lookup;
  for (auto& r : running_)
    for (Choice& c : r->choices) {
      if (c.done || !c.waiting) continue;
      c.guesses.clear();
      const int64_t room = engine_.room(c.id) - 1;
      if (!c.draft || room < 1) {
        ++other;
        continue;
      }
      Wanted w{&c, engine_.tokens(c.id), {}};
      w.history.push_back(c.gen.next());
      int64_t k = 0;
      if (c.draft_sampler) {
        k = std::min(c.draft->next(), room);
      } else {
        w.guesses = lookup.propose(w.history, std::min(c.draft->k_max(), room));
        k = static_cast<int64_t>(w.guesses.size());
      }
      if (k == 0) {
        ++other;
        continue;
      }
      StepGuesses::Proposal p{k, c.draft->acceptance(), static_cast<bool>(c.draft_sampler)};
      if (p.drafted) {
        const int64_t budget = c.gen.params().max_tokens;
        p.left = budget < 0 ? room + 1 : std::min(room + 1, budget - c.gen.generated());
      }
      proposals.push_back(p);
      wanted.push_back(std::move(w));
    }
  // What the draft has not seen is looked up (a hash of the history) only for
  // a step that may take drafted guesses.
  if (StepGuesses::drafts(proposals.size(), other))
    for (size_t i = 0; i < proposals.size(); ++i)
      if (proposals[i].drafted) proposals[i].unseen = draft_->unseen(wanted[i].c->draft_seq, wanted[i].history);
  const std::vector<int64_t> take = step_guesses_.take(proposals, other);
  // The draft model's guesses, for every choice whose step takes some, in one batch.
  std::vector<DraftBatch::Want> wants;
  std::vector<size_t> asked;
  for (size_t i = 0; i < wanted.size(); ++i) {
    Choice& c = *wanted[i].c;
    if (c.draft_sampler && take[i] > 0) {
      wants.push_back({&c.draft_seq, wanted[i].history, take[i], &*c.draft_sampler});
      asked.push_back(i);
    } else {
      wanted[i].guesses.resize(static_cast<size_t>(take[i]));
      for (int32_t t : wanted[i].guesses) c.guesses.push_back(Guess{t, {}});
    }
  }
  if (!wants.empty()) {
    std::vector<std::vector<Guess>> drafted = draft_->propose(wants);
    for (size_t j = 0; j < asked.size(); ++j) {
      wanted[asked[j]].c->guesses = std::move(drafted[j]);
      for (const Guess& g : wanted[asked[j]].c->guesses) wanted[asked[j]].guesses.push_back(g.token);
    }
  }
  for (Wanted& w : wanted) {
    w.c->waiting = false;
    engine_.push(w.c->id, w.c->gen.next(), w.guesses);
  }
  for (auto& r : running_)
    for (Choice& c : r->choices)
      if (!c.done && c.waiting) {
        c.waiting = false;
        engine_.push(c.id, c.gen.next());
      }
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(m_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !running_.empty() || !embed_queue_.empty(); });
      if (stop_) break;
      if (cancel_all_)
        for (auto& r : running_) r->job->cancel();
    }
    // Admissions, in order: the head of the queue waits until it fits.
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::lock_guard<std::mutex> lock(m_);
        if (queue_.empty()) break;
        job = queue_.front();
      }
      if (!job->cancelled() && !try_admit(job)) break;
      std::lock_guard<std::mutex> lock(m_);
      queue_.pop_front();
      // Moved from the queue to the running set in one step, as wait_idle() sees it: between
      // here and the publish() below, a drain would otherwise see nothing waiting or running.
      gauges_.queue_depth = static_cast<int64_t>(queue_.size());
      gauges_.running_requests = static_cast<int64_t>(running_.size());
      if (job->cancelled())  // gone before it started: answer nothing more, count nothing
        for (int i = 0; i < job->request().n; ++i) job->push(Event{Event::Kind::End, i, "", -1, 0, {}, "cancelled"});
    }
    // One embedding input per turn, between steps: a long one delays the streams by one pass.
    embed_one();
    // Cancelled requests leave at once, their blocks with them.
    for (auto& r : running_)
      if (r->job->cancelled())
        for (Choice& c : r->choices)
          if (!c.done) finish_choice(*r, c, Finish::Cancelled);
    if (!running_.empty()) {
      const uint64_t tokens = engine_.counters().tokens;
      const auto t0 = std::chrono::steady_clock::now();
      engine_.step();
      step_guesses_.record(static_cast<int64_t>(engine_.counters().tokens - tokens),
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      for (auto& r : running_) {
        advance(*r);
        for (Choice& c : r->choices)
          if (!c.done && engine_.stopped(c.id)) finish_choice(*r, c, Finish::ContextFull);
      }
      push_next();
    }
    // Finished requests leave the running set.
    for (auto it = running_.begin(); it != running_.end();) {
      const auto& r = **it;
      const bool all_done = r.forked && std::all_of(r.choices.begin(), r.choices.end(), [](const Choice& c) { return c.done; });
      const bool cancelled_early = !r.forked && r.choices[0].done;
      if (all_done || cancelled_early) {
        if (cancelled_early)  // cancelled before the prompt was evaluated: the forks never existed
          for (int i = 1; i < r.job->request().n; ++i)
            r.job->push(Event{Event::Kind::End, i, "", -1, 0, {}, "cancelled"});
        if (r.job->ttft_ms() >= 0) metrics_.ttft(r.job->ttft_ms() / 1000.0);
        metrics_.tokens(r.job->prompt_tokens(), r.job->completion_tokens());
        it = running_.erase(it);
      } else {
        ++it;
      }
    }
    publish();
    cv_.notify_all();
  }
  // Shutting down: every job still here ends now.
  for (auto& job : embed_queue_) {
    std::lock_guard<std::mutex> lock(job->m_);
    job->done_ = job->failed_ = true;
    job->cv_.notify_all();
  }
  for (auto& r : running_)
    for (Choice& c : r->choices)
      if (!c.done) finish_choice(*r, c, Finish::Cancelled);
}

}  // namespace tally::server
