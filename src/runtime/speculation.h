#pragma once
// Drafts for speculative decoding: guesses of the next tokens that one step
// of the target model then verifies together (runtime/generator.h), so the
// weights are read once for several tokens while decoding is memory-bound.
//
// Prompt lookup guesses for free: when the last n tokens (n from ngram_max
// down to ngram_min) occurred before, in the prompt or in the text generated
// so far, the tokens that followed their latest occurrence are the guesses
// (code edits repeat much of the prompt). DraftLength picks how many to ask
// for: the k that maximizes the tokens a step is expected to make over what
// the step costs. With a guess kept with probability r (each in turn, until
// one is rejected), a step with k guesses makes 1 + r + ... + r^k tokens; it
// costs a + b k (or, for a k timed lately, what its steps took): a line
// fitted to the times of recent steps with guesses
// (decayed least squares; a > t0, a step of one token, where speculating has
// a cost of its own, as a draft model catching up does), measured against t0
// (the first steps have no guesses, to time it, and so has one step in 32
// later, to time it again). k = 0 when no k beats one
// token per t0, with a probe of one guess now and then to learn whether
// guesses got better; and while every timed step had one length, another
// (half the longest draft) at once: the line then has a slope, and a step's
// own cost is not charged to its guesses.
// DraftModel guesses with a smaller model of the same vocabulary, in a
// session of its own; DraftBatch does the same for many sequences at once
// (the server's), each round of guesses one batched step of its engine.
// A draft may guess from part of the vocabulary (its `vocab`): the first ids
// and every token of the history it follows (Forward::limit_logits). The
// output matrix is a large share of a small model's reads (qwen2.5-coder
// 0.5B: 145 of 392 MB a token), and byte-pair vocabularies number their
// tokens in merge order, so the first ids are the frequent ones; what the
// reply copies (names, rare words of the prompt) is in the history. A guess
// outside is never made, which costs a guess, never the output: greedy keeps
// its tokens, and sampling's q is the distribution the draft drew from.
// Invariants: a proposal is never longer than asked; DraftLength::next() is
// in [0, k_max]; a draft's cache holds, per sequence, a prefix of the history
// it was last given followed by its own guesses, nothing else.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "runtime/engine.h"
#include "runtime/generation.h"
#include "runtime/session.h"
#include "sampler/sampler.h"

namespace tally {

class PromptLookup {
 public:
  explicit PromptLookup(int ngram_min = 2, int ngram_max = 4);
  // Up to k tokens that followed the latest earlier occurrence of history's
  // longest matching tail; empty when none matches.
  std::vector<int32_t> propose(std::span<const int32_t> history, int64_t k) const;

 private:
  int ngram_min_, ngram_max_;
};

// The vocabulary a draft guesses from unless told otherwise: 32,768 ids.
inline constexpr int64_t kDefaultDraftVocab = 32768;

// A draft model: its cache follows the target's history (rolled back to what
// they share, so rejected guesses leave it, then the rest evaluated), and it
// decodes k tokens one at a time. With a greedy target it guesses its argmax
// (q: a point mass); otherwise it draws from its own distribution under the
// target's sampling parameters and hands that distribution on as q, which the
// accept rule needs to keep the output distributed as the target's.
class DraftModel {
 public:
  // session: the draft's own (one sequence, one row of logits); not owned.
  // vocab: the ids below it and the history's are guessed from (0: all).
  DraftModel(Session& session, const SamplerParams& target, int64_t vocab = 0);
  // Brings the cache to history and keeps the logits after it; returns the
  // positions it evaluated.
  int64_t follow(std::span<const int32_t> history);
  std::vector<Guess> propose(std::span<const int32_t> history, int64_t k);
  // Positions the draft wrote and then gave back (its rejected guesses).
  int64_t rolled_back() const { return rolled_back_; }

 private:
  Session& s_;
  Sampler sampler_;
  int64_t vocab_;
  std::vector<float> logits_;  // after the cache's last position
  int64_t rolled_back_ = 0;
};

// The draft's guess at one position from its logits there: the argmax when
// the sampler is greedy (q: a point mass), else a draw under the target's
// sampling parameters with the distribution it came from as q. seen: the
// history and the guesses before, of which the last `guessed` are guesses.
Guess draft_guess(Sampler& sampler, std::span<const float> logits, std::span<const int32_t> seen, size_t guessed);

// A draft model guessing for many sequences at once: its own engine, a
// sequence per drafting caller, and each round of guesses one batched decode
// step for all of them. A sequence follows its caller's history lazily: at
// each propose() it is rolled back to what they share and the rest is
// pushed, so a new sequence's prefill (or a long catch-up) runs in the
// engine's chunks over several calls, with no guesses for it meanwhile,
// instead of stalling the others.
class DraftBatch {
 public:
  // vocab: as DraftModel's, the history of every sequence of a round added.
  DraftBatch(const Model& draft, const EngineOptions& eo, int64_t vocab = 0);
  struct Want {
    std::optional<Engine::Id>* seq;    // the caller's draft sequence; opened here when empty
    std::span<const int32_t> history;  // the target's tokens, then the token it evaluates next
    int64_t k = 0;                     // guesses wanted
    Sampler* sampler = nullptr;        // the caller's draft sampler (see draft_guess)
  };
  // Up to k guesses for each want (none while its sequence catches up, or
  // when the draft's pool cannot hold it now).
  std::vector<std::vector<Guess>> propose(std::span<const Want> wants);
  void release(Engine::Id id) { engine_.release(id); }
  // Called after each of the draft engine's steps with its tokens and seconds
  // (the server weighs a round of guesses with them: StepGuesses).
  void on_step(std::function<void(int64_t tokens, double seconds)> f) { on_step_ = std::move(f); }
  // The tokens of history the draft would prefill before seq's first guess
  // (those past its prefix cache's hit; none once seq follows the history).
  int64_t unseen(const std::optional<Engine::Id>& seq, std::span<const int32_t> history) const;
  // Positions the draft wrote and then gave back (rejected guesses, mostly).
  int64_t rolled_back() const { return rolled_back_; }
  const Engine& engine() const { return engine_; }

 private:
  // Rolls the sequence back to what it shares with history and pushes the
  // rest; true when it holds history already (its logits follow it). A
  // sequence with nothing in common is released (seq emptied).
  bool follow(std::optional<Engine::Id>& seq, std::span<const int32_t> history);
  void step();  // one step of the draft engine, timed for on_step
  Engine engine_;
  int64_t vocab_;
  std::vector<int32_t> seen_;  // the rounds' history tokens outside the first vocab_ ids
  std::function<void(int64_t, double)> on_step_;
  int64_t rolled_back_ = 0;
};

// Refuses (tally::Error, naming what differs) a draft whose tokens are not
// the target's: the same ids must mean the same text, and both models must
// have as many rows of logits.
void check_draft_vocabulary(const Tokenizer& target, int64_t target_logits, const Tokenizer& draft,
                            int64_t draft_logits);

// A line y = a + b x fitted by least squares to recent points (each older
// one weighing `decay` times less): the time of a step against its guesses
// or tokens.
class LineFit {
 public:
  explicit LineFit(double decay) : decay_(decay) {}
  void add(double x, double y);
  bool empty() const { return w_ == 0; }
  double mean_x() const { return sx_ / w_; }
  double mean_y() const { return sy_ / w_; }
  // Whether x varied enough (variance > min_variance) to fit a slope.
  bool spread(double min_variance) const { return variance() > min_variance; }
  double slope() const { return (sxy_ / w_ - mean_x() * mean_y()) / variance(); }
  double intercept() const { return mean_y() - slope() * mean_x(); }

 private:
  double variance() const { return w_ > 0 ? sxx_ / w_ - mean_x() * mean_x() : 0; }
  double decay_;
  double w_ = 0, sx_ = 0, sxx_ = 0, sy_ = 0, sxy_ = 0;
};

class DraftLength {
 public:
  // prior_cost: a guess's cost in one-token steps until the steps are timed;
  // prior_kept: the chance a guess is kept, before any was verified;
  // probe_every: steps without guesses between probes while none pays (a
  // draft model's probe costs its catching up on the steps it missed).
  explicit DraftLength(int64_t k_max, double prior_cost = 0.1, double prior_kept = 0.5, int64_t probe_every = 16);
  // Guesses to ask for at the next step (0: decode without speculating).
  int64_t next();
  // How the last step went: guesses verified, kept, and the step's time
  // (seconds; <= 0 when not measured).
  void record(int64_t proposed, int64_t accepted, double seconds = 0);
  double acceptance() const { return kept_ / tried_; }
  int64_t k_max() const { return k_max_; }
  // Tokens per unit of time with k guesses, relative to a step of one token.
  double gain(int64_t k) const;

 private:
  int64_t k_max_;
  int64_t probe_every_;
  double prior_cost_;
  double kept_, tried_ = 2;  // decayed counts of guesses kept and verified (a prior of two guesses)
  double t0_ = 0;  // seconds of a one-token step (0: not measured)
  LineFit steps_;  // seconds against k, over the timed steps with guesses
  std::vector<double> by_length_;  // seconds of the recent timed steps of each k (0: none)
  int64_t idle_ = 0;               // steps without speculation since the last probe
  int64_t plain_ = 0, plain_timed_ = 0;  // plain steps asked for at the start; plain steps timed
  int64_t since_plain_ = 0;               // steps with guesses since the last plain one
  bool relength_ = false;  // a probe of another length is out, not yet timed
};

// The draft length of a sequence whose guesses come from `draft` (null:
// prompt lookup) for `target`: until timed, a draft model's guess costs what
// its weights weigh against the target's, and is kept three times in four.
DraftLength draft_length(int64_t k_max, const Model& target, const Model* draft);

// Speculation in a batched step (the server's): which guesses of the
// sequences' proposals go into the next step. A step of n tokens costs
// S(n) seconds: what the recent steps of n tokens took, where such steps
// were timed lately (small steps, n < kSizes, within the last kSizeAge
// steps), else a + b n (a line fitted to the engine's recent steps: a is
// reading the weights, b each token's compute). A size's time ages out so
// that one slow step, or a context grown since, does not hold a price that
// no step of that size is taken to correct.
// The timed sizes see what the line cannot: the matrix kernels take tokens
// in tiles, so a token past a full tile costs another pass of unpacking the
// weights (on 2 cores of an AVX-512 Xeon, 9 tokens took 13 ms more than 8,
// and 8 only 9 ms more than 4).
// A guess kept with probability q adds q tokens for S(n + 1) - S(n) seconds.
// Taken in order of q, a guess goes in while it raises the step's expected
// tokens per second: q S > (S(n + 1) - S(n)) T with T the expected tokens,
// n the tokens and S the seconds of the step so far. A step already full of
// sequences has a high T / S, so it takes only guesses almost sure to be
// kept; one sequence alone takes guesses while the weights' read dominates.
// Until steps of several sizes were timed, no guesses are taken.
// A draft model's guesses cost its steps too: the i-th guesses of all
// drafting sequences come from one step of the draft (a' + b' n seconds, a
// line fitted to its timed steps), so drafted guesses go in a depth at a
// time: the likeliest m of those reaching it, for a' + m b' seconds and
// the target's S(n + m) - S(n), with the m that raises the step's tokens per
// second most. For now only a step of one sequence (no other token in it, a
// prompt's chunk included) takes drafted guesses: rounds shared by several
// measured below no draft where these lines priced them above it.
// A draft that has not seen a sequence's history must prefill it before its
// first guess (b' a token): a cost paid once, spread over the steps left to
// repay it (the reply's tokens left over the tokens a step of its guesses is
// expected to make), so a short reply after a long unseen prompt does not
// start drafting.
class StepGuesses {
 public:
  StepGuesses();
  // A step's tokens and seconds: the target's, and the draft model's.
  void record(int64_t tokens, double seconds);
  void record_draft(int64_t tokens, double seconds);
  // One sequence's proposal: its guesses in order, each kept (given the ones
  // before) with probability r; drafted: from the draft model, which has not
  // seen `unseen` tokens of its history yet; `left`: the tokens its reply may
  // still make (0: not known).
  struct Proposal {
    int64_t guesses = 0;
    double r = 0;
    bool drafted = false;
    int64_t unseen = 0;
    int64_t left = 0;
  };
  // How many of each proposal's guesses to take for a step that also
  // evaluates `other` tokens (decodes without guesses, prefill chunks).
  std::vector<int64_t> take(std::span<const Proposal> proposals, int64_t other) const;
  bool timed() const;
  // Whether a step of `sequences` proposals and `other` tokens beside them
  // may take drafted guesses (the one-sequence rule above); a caller may skip
  // what only drafted guesses need (Proposal::unseen) when it may not.
  static bool drafts(size_t sequences, int64_t other) { return other + static_cast<int64_t>(sequences) <= 1; }

 private:
  static constexpr int64_t kSizes = 64, kSizeAge = 256;
  struct Sized {
    double seconds = 0;  // the recent steps of this size (0: none timed)
    int64_t at = 0;      // the step count when the last one was timed
  };
  // The recent time of a step of `size` (< kSizes) tokens; 0 where none was timed in the last kSizeAge steps.
  double size_time(int64_t size) const;
  LineFit cost_, draft_;
  std::vector<Sized> sized_;  // by the target's step size, below kSizes
  int64_t steps_ = 0;         // target steps timed
};

}  // namespace tally
