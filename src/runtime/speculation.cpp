#include "runtime/speculation.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "core/printable.h"

namespace tally {

namespace {
constexpr double kDecay = 0.9;            // of the counts, per step: the recent steps count most
constexpr double kTimeWeight = 0.2;       // of the newest plain step in t0's average
constexpr double kLengthWeight = 0.3;     // of the newest step in its length's average
constexpr double kTimeDecay = 0.95;       // of the timed steps with guesses, per step
constexpr double kMinSpread = 0.25;       // variance of their k under which no line is fitted
constexpr double kStepDecay = 0.98;       // of the batched engine's timed steps, per step
constexpr int64_t kPlainFirst = 2;        // steps without guesses at the start, to time t0
// A length is taken only when it is expected to beat no guesses by this
// much: the fitted costs are noisy (t0 moves with the context and the
// machine), and guessing on a wrong estimate costs more than a missed gain.
constexpr double kMinGain = 1.05;
constexpr int64_t kRetimeEvery = 32;      // steps with guesses between steps that time t0 again

// A step's time folded into the recent average of its size (0: none yet).
double recent(double average, double seconds) {
  return average > 0 ? (1 - kLengthWeight) * average + kLengthWeight * seconds : seconds;
}
}  // namespace

PromptLookup::PromptLookup(int ngram_min, int ngram_max) : ngram_min_(ngram_min), ngram_max_(ngram_max) {
  if (ngram_min < 1 || ngram_max < ngram_min) fail("prompt lookup n-grams must satisfy 1 <= min <= max, got {} and {}", ngram_min, ngram_max);
}

std::vector<int32_t> PromptLookup::propose(std::span<const int32_t> history, int64_t k) const {
  const int64_t len = static_cast<int64_t>(history.size());
  if (k < 1) return {};
  for (int64_t n = std::min<int64_t>(ngram_max_, len - 1); n >= ngram_min_; --n) {
    const auto tail = history.last(static_cast<size_t>(n));
    // The latest earlier occurrence that has at least one token after it.
    for (int64_t start = len - n - 1; start >= 0; --start) {
      if (!std::equal(tail.begin(), tail.end(), history.begin() + start)) continue;
      const int64_t from = start + n, count = std::min(k, len - from);
      return std::vector<int32_t>(history.begin() + from, history.begin() + from + count);
    }
  }
  return {};
}

DraftModel::DraftModel(Session& session, const SamplerParams& target, int64_t vocab)
    : s_(session), sampler_([&] {
        SamplerParams p = target;
        p.seed = target.seed ^ 0x9e3779b97f4a7c15ULL;  // its own stream: the target's draws stay as they are
        return p;
      }()), vocab_(vocab) {}

int64_t DraftModel::follow(std::span<const int32_t> history) {
  if (history.empty()) fail("the draft model follows an empty history");
  const std::vector<int32_t>& have = s_.tokens();
  const auto n = static_cast<int64_t>(history.size());
  int64_t same = std::mismatch(have.begin(), have.end(), history.begin(), history.end()).first - have.begin();
  if (same == n && static_cast<int64_t>(have.size()) == n && !logits_.empty()) return 0;
  same = std::min(same, n - 1);  // the last token is evaluated again when nothing after it is: its logits are needed
  if (vocab_ > 0) s_.engine().limit_logits(vocab_, history);
  if (s_.length() > same) {
    rolled_back_ += s_.length() - same;
    s_.truncate(same);
  }
  const auto l = s_.append(history.subspan(static_cast<size_t>(same)));
  logits_.assign(l.begin(), l.end());
  return n - same;
}

Guess draft_guess(Sampler& sampler, std::span<const float> logits, std::span<const int32_t> seen, size_t guessed) {
  const std::span<const Sampler::Candidate> dist = sampler.distribution(logits, seen, guessed);
  Guess g;
  if (sampler.greedy()) {
    g.token = dist.front().id;
    return g;
  }
  g.token = sampler.draw(dist);
  double total = 0;
  for (const Sampler::Candidate& c : dist) total += c.p;
  g.q.reserve(dist.size());
  for (const Sampler::Candidate& c : dist) g.q.emplace_back(c.id, static_cast<float>(c.p / total));
  return g;
}

std::vector<Guess> DraftModel::propose(std::span<const int32_t> history, int64_t k) {
  std::vector<Guess> out;
  if (k < 1) return out;
  follow(history);
  std::vector<int32_t> seen(history.begin(), history.end());
  for (int64_t i = 0; i < k && s_.length() < s_.n_ctx(); ++i) {
    out.push_back(draft_guess(sampler_, logits_, seen, static_cast<size_t>(i)));
    seen.push_back(out.back().token);
    if (i + 1 < k) {
      const auto l = s_.append(std::span<const int32_t>(&seen.back(), 1));
      logits_.assign(l.begin(), l.end());
    } else {
      logits_.clear();  // the last guess is not evaluated: the next follow() evaluates what was kept
    }
  }
  return out;
}

DraftBatch::DraftBatch(const Model& draft, const EngineOptions& eo, int64_t vocab)
    : engine_(draft, eo), vocab_(vocab) {}

int64_t DraftBatch::unseen(const std::optional<Engine::Id>& seq, std::span<const int32_t> history) const {
  const auto n = static_cast<int64_t>(history.size());
  if (seq || n == 0) return 0;  // a sequence that follows catches up on the steps it missed only
  return n - engine_.cache().probe_prefix(history, n - 1).positions;
}

bool DraftBatch::follow(std::optional<Engine::Id>& seq, std::span<const int32_t> history) {
  const Engine::Id id = *seq;
  const std::vector<int32_t>& have = engine_.tokens(id);
  const auto n = static_cast<int64_t>(history.size());
  int64_t same = std::mismatch(have.begin(), have.end(), history.begin(), history.end()).first - have.begin();
  if (same == n && static_cast<int64_t>(have.size()) == n) return true;
  same = std::min(same, n - 1);  // the last token is evaluated again when nothing after it is: its logits are needed
  if (same == 0) {  // nothing in common (a sequence needs a first token): admitted again at the next call
    engine_.release(id);
    seq.reset();
    return false;
  }
  if (static_cast<int64_t>(have.size()) > same) {
    rolled_back_ += static_cast<int64_t>(have.size()) - same;
    engine_.truncate(id, same);
  }
  if (n - same > engine_.room(id)) return false;  // longer than its pool lets it grow: no guesses
  // Usually one or two tokens (what the target kept after the draft's last
  // evaluated guess). Pushed as guesses they get the rows of logits they need;
  // a step short of rows drops some, and the next call pushes them again.
  const auto rest = history.subspan(static_cast<size_t>(same));
  engine_.push(id, rest.front(), rest.subspan(1));
  return false;
}

void DraftBatch::step() {
  const uint64_t tokens = engine_.counters().tokens;
  const auto t0 = std::chrono::steady_clock::now();
  engine_.step();
  if (on_step_)
    on_step_(static_cast<int64_t>(engine_.counters().tokens - tokens),
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

std::vector<std::vector<Guess>> DraftBatch::propose(std::span<const Want> wants) {
  std::vector<std::vector<Guess>> out(wants.size());
  // Each sequence brought to its history: admitted, or rolled back and the rest pushed.
  std::vector<size_t> live;
  std::vector<char> is_live(wants.size(), 0);
  bool pending = false;
  for (size_t i = 0; i < wants.size(); ++i) {
    const Want& w = wants[i];
    if (w.k < 1 || w.history.empty()) continue;
    if (!*w.seq) {
      const Engine::Admission a = engine_.admit(w.history);
      if (a.id) *w.seq = *a.id;
      pending = true;
      continue;
    }
    if (!engine_.ready(**w.seq)) {  // still prefilling, or preempted
      pending = true;
      continue;
    }
    if (follow(*w.seq, w.history)) live.push_back(i), is_live[i] = 1;
    else pending = true;
  }
  if (vocab_ > 0) {
    seen_.clear();
    for (const Want& w : wants)
      if (w.k > 0 && *w.seq)
        for (const int32_t t : w.history)
          if (t >= vocab_) seen_.push_back(t);
    engine_.limit_logits(vocab_, seen_);
  }
  if (pending) step();
  for (size_t i = 0; i < wants.size(); ++i) {
    const Want& w = wants[i];
    if (w.k < 1 || !*w.seq || is_live[i]) continue;
    const std::vector<int32_t>& have = engine_.tokens(**w.seq);
    if (engine_.ready(**w.seq) && std::equal(have.begin(), have.end(), w.history.begin(), w.history.end()))
      live.push_back(i);
  }
  // Rounds of guesses: each sequence's next guess from its logits, then one
  // step evaluates them all (the last guess is not evaluated: the next call
  // rolls back to what the target kept and evaluates that).
  std::vector<std::vector<int32_t>> seen(wants.size());
  for (size_t i : live) seen[i].assign(wants[i].history.begin(), wants[i].history.end());
  for (;;) {
    bool pushed = false;
    for (size_t i : live) {
      const Want& w = wants[i];
      const Engine::Id id = **w.seq;
      if (static_cast<int64_t>(out[i].size()) >= w.k || !engine_.ready(id)) continue;
      out[i].push_back(draft_guess(*w.sampler, engine_.logits(id), seen[i], out[i].size()));
      seen[i].push_back(out[i].back().token);
      if (static_cast<int64_t>(out[i].size()) < w.k && engine_.room(id) > 0) {
        engine_.push(id, seen[i].back());
        pushed = true;
      }
    }
    if (!pushed) return out;
    step();
  }
}

void check_draft_vocabulary(const Tokenizer& target, int64_t target_logits, const Tokenizer& draft,
                            int64_t draft_logits) {
  if (draft_logits != target_logits)
    fail("the draft model has {} rows of logits, the target {}: a draft must share the target's vocabulary",
         draft_logits, target_logits);
  if (draft.n_vocab() != target.n_vocab())
    fail("the draft model's tokenizer has {} tokens, the target's {}: a draft must share the target's vocabulary",
         draft.n_vocab(), target.n_vocab());
  for (int32_t id = 0; id < target.n_vocab(); ++id)
    if (draft.token_text(id) != target.token_text(id) || draft.is_control(id) != target.is_control(id))
      fail("token {} is '{}' in the draft model's vocabulary and '{}' in the target's: a draft must share the "
           "target's vocabulary",
           id, excerpt(draft.token_text(id)), excerpt(target.token_text(id)));
}

void LineFit::add(double x, double y) {
  w_ = decay_ * w_ + 1;
  sx_ = decay_ * sx_ + x;
  sxx_ = decay_ * sxx_ + x * x;
  sy_ = decay_ * sy_ + y;
  sxy_ = decay_ * sxy_ + x * y;
}

StepGuesses::StepGuesses() : cost_(kStepDecay), draft_(kStepDecay), sized_(kSizes) {}

void StepGuesses::record(int64_t tokens, double seconds) {
  if (tokens <= 0 || seconds <= 0) return;
  cost_.add(static_cast<double>(tokens), seconds);
  ++steps_;
  if (tokens < kSizes) {
    const double last = size_time(tokens);
    Sized& c = sized_[static_cast<size_t>(tokens)];
    c.seconds = recent(last, seconds);
    c.at = steps_;
  }
}

void StepGuesses::record_draft(int64_t tokens, double seconds) {
  if (tokens > 0 && seconds > 0) draft_.add(static_cast<double>(tokens), seconds);
}

double StepGuesses::size_time(int64_t size) const {
  const Sized& c = sized_[static_cast<size_t>(size)];
  return c.seconds > 0 && steps_ - c.at <= kSizeAge ? c.seconds : 0;
}

bool StepGuesses::timed() const { return !cost_.empty() && cost_.spread(kMinSpread) && cost_.slope() > 0; }

std::vector<int64_t> StepGuesses::take(std::span<const Proposal> proposals, int64_t other) const {
  std::vector<int64_t> out(proposals.size(), 0);
  if (!timed()) return out;
  const double a = std::max(cost_.intercept(), 0.0), b = cost_.slope();
  // The draft's step: a line once its sizes varied (none before it was
  // timed); until then a step of one token at the cost per token of the
  // steps timed. Its first step is often a prompt's prefill: priced whole, a
  // round of guesses would look as dear as that, none would be drafted, and
  // no round would ever be timed to correct it.
  double da = 0, db = 0;
  if (!draft_.empty()) {
    const bool line = draft_.spread(kMinSpread) && draft_.slope() > 0;
    db = line ? draft_.slope() : 0;
    da = line ? std::max(draft_.intercept(), 0.0) : draft_.mean_y() / std::max(draft_.mean_x(), 1.0);
  }
  // The target's step of n tokens: as timed lately at that size, else the line.
  auto price = [&](int64_t size) {
    const double t = size < kSizes ? size_time(size) : 0;
    return t > 0 ? t : a + b * static_cast<double>(size);
  };
  // Every sequence's next token is sure; guess i of a proposal is kept with r^i.
  int64_t n = other + static_cast<int64_t>(proposals.size());
  double tokens = static_cast<double>(n);
  std::vector<double> q(proposals.size());
  for (size_t i = 0; i < proposals.size(); ++i) q[i] = proposals[i].r;
  // Free guesses (prompt lookup's) one at a time, likeliest first.
  for (;;) {
    size_t best = proposals.size();
    for (size_t i = 0; i < proposals.size(); ++i)
      if (!proposals[i].drafted && out[i] < proposals[i].guesses && (best == proposals.size() || q[i] > q[best]))
        best = i;
    if (best == proposals.size() || q[best] * price(n) <= (price(n + 1) - price(n)) * tokens) break;
    ++out[best];
    ++n;
    tokens += q[best];
    q[best] *= proposals[best].r;
  }
  // A draft model's guesses go only into a step of one sequence: rounds
  // shared by several were priced above no draft by the two lines and
  // measured below it (0.81-0.90x at 4 clients on 2 cores: the draft's
  // prefills and batched steps cost more than its lines say), while one
  // sequence's rounds held their gain.
  if (!drafts(proposals.size(), other)) return out;
  // A draft's prefill of the history it has not seen, per step left to repay
  // it (b' a token; the target's b until the draft's line is fitted).
  std::vector<double> opening(proposals.size(), 0);
  for (size_t i = 0; i < proposals.size(); ++i) {
    const Proposal& p = proposals[i];
    if (!p.drafted || p.unseen < 1) continue;
    double per_step = 1, kept = 1;
    for (int64_t g = 0; g < p.guesses; ++g) per_step += (kept *= p.r);
    const double steps = std::max(1.0, static_cast<double>(p.left) / per_step);
    opening[i] = static_cast<double>(p.unseen) * (db > 0 ? db : b) / steps;
  }
  // Drafted guesses a depth at a time: the likeliest m of the sequences that
  // reach it, for the m that raises tokens per second most (the draft's step
  // for that depth shared by them); a depth none pays for ends the drafting.
  // `drafting`: the seconds of the draft's steps and openings taken so far.
  double drafting = 0;
  std::vector<size_t> at;
  for (int64_t depth = 0;; ++depth) {
    at.clear();
    for (size_t i = 0; i < proposals.size(); ++i)
      if (proposals[i].drafted && out[i] == depth && proposals[i].guesses > depth) at.push_back(i);
    std::sort(at.begin(), at.end(), [&](size_t x, size_t y) { return q[x] > q[y]; });
    size_t best_m = 0;
    double best_rate = tokens / (price(n) + drafting), t = tokens, d = drafting + da;
    for (size_t m = 0; m < at.size(); ++m) {
      t += q[at[m]];
      d += db + (depth == 0 ? opening[at[m]] : 0);
      const double sec = price(n + static_cast<int64_t>(m) + 1) + d;
      if (t / sec > best_rate) best_rate = t / sec, best_m = m + 1;
    }
    if (best_m == 0) return out;
    drafting += da;
    for (size_t m = 0; m < best_m; ++m) {
      const size_t i = at[m];
      ++out[i];
      ++n;
      tokens += q[i];
      drafting += db + (depth == 0 ? opening[i] : 0);
      q[i] *= proposals[i].r;
    }
  }
}

DraftLength::DraftLength(int64_t k_max, double prior_cost, double prior_kept, int64_t probe_every)
    : k_max_(k_max),
      probe_every_(probe_every),
      prior_cost_(prior_cost),
      kept_(2 * prior_kept),
      steps_(kTimeDecay),
      by_length_(static_cast<size_t>(std::max<int64_t>(k_max, 0)) + 1, 0) {
  if (probe_every < 1) fail("probes must come every 1 or more steps, got {}", probe_every);
  if (k_max < 1) fail("a draft of at least 1 token is needed, got {}", k_max);
  if (!(prior_cost > 0)) fail("a guess's prior cost must be > 0, got {}", prior_cost);
  if (!(prior_kept > 0 && prior_kept < 1)) fail("a guess's prior chance to be kept must be in (0, 1), got {}", prior_kept);
}

double DraftLength::gain(int64_t k) const {
  const double r = acceptance();
  // A step with k guesses costs a + b k one-token steps: the line fitted to
  // the timed steps with guesses when their k varied; through t0 when k was
  // one value; the prior until timed.
  double a = 1, b = prior_cost_;
  if (t0_ > 0 && !steps_.empty()) {
    if (steps_.spread(kMinSpread)) {
      b = steps_.slope();
      a = steps_.intercept();
    } else {
      b = (steps_.mean_y() - t0_) / steps_.mean_x();
      a = t0_;
    }
    a /= t0_;
    b /= t0_;
    a = std::max(a, 1.0);  // noise: a step with guesses costs a plain one at least
    b = std::max(b, 0.0);
  }
  double cost = a + b * static_cast<double>(k);
  // A length timed lately costs what it took: the line misses the steps in
  // the cost (a verification of two tokens, a matrix tile filled by one more).
  if (t0_ > 0 && static_cast<size_t>(k) < by_length_.size() && by_length_[static_cast<size_t>(k)] > 0)
    cost = std::max(by_length_[static_cast<size_t>(k)] / t0_, 1.0);
  double tokens = 0, p = 1;
  for (int64_t i = 0; i <= k; ++i, p *= r) tokens += p;
  return tokens / cost;
}

int64_t DraftLength::next() {
  // The first steps have no guesses: they time a one-token step, what a
  // guess's cost is measured against (the first of them, cold after the
  // prefill, is not counted); while guessing, one step in kRetimeEvery has
  // none, to time it again as the context grows.
  if (plain_ < kPlainFirst && t0_ == 0) {
    ++plain_;
    return 0;
  }
  int64_t best = 0;
  double best_gain = kMinGain;
  for (int64_t k = 1; k <= k_max_; ++k)
    if (const double g = gain(k); g > best_gain) best = k, best_gain = g;
  if (best > 0) {
    idle_ = 0;
    if (++since_plain_ < kRetimeEvery) return best;
    since_plain_ = 0;
    return 0;
  }
  since_plain_ = 0;
  // While every timed step with guesses had one length, the line is drawn
  // through t0 and charges the step's own cost (a draft model catching up,
  // a verification of two tokens) to its guesses: another length is tried at once.
  const bool one_length = k_max_ > 1 && !relength_ && !steps_.empty() && !steps_.spread(kMinSpread);
  if (!one_length && ++idle_ < probe_every_) return 0;
  idle_ = 0;
  relength_ = one_length;
  // A probe, to see whether guesses are kept again: one guess (the cheapest);
  // for another length, half the longest draft, or one guess where the timed
  // steps had that many already.
  if (!one_length) return 1;
  const int64_t half = std::max<int64_t>(1, k_max_ / 2);
  return std::llround(steps_.mean_x()) == half ? (half > 1 ? 1 : std::min<int64_t>(2, k_max_)) : half;
}

void DraftLength::record(int64_t proposed, int64_t accepted, double seconds) {
  if (seconds > 0 && proposed == 0 && ++plain_timed_ > 1)
    t0_ = t0_ > 0 ? (1 - kTimeWeight) * t0_ + kTimeWeight * seconds : seconds;
  if (seconds > 0 && proposed > 0) {
    steps_.add(static_cast<double>(proposed), seconds);
    if (proposed <= k_max_) {
      double& c = by_length_[static_cast<size_t>(proposed)];
      c = recent(c, seconds);
    }
    relength_ = false;
  }
  if (proposed < 1) return;
  // Guesses are verified in order until one is rejected: accepted kept, and
  // one more tried when not all were kept.
  kept_ = kDecay * kept_ + static_cast<double>(accepted);
  tried_ = kDecay * tried_ + static_cast<double>(accepted + (accepted < proposed ? 1 : 0));
}

DraftLength draft_length(int64_t k_max, const Model& target, const Model* draft) {
  if (draft == nullptr) return DraftLength(k_max);
  // Its probes come four times less often than lookup's: each makes it catch
  // up on the steps it missed (about 8% of 16 steps' time for the 0.5B behind the 1.5B).
  return DraftLength(k_max, 0.1 + static_cast<double>(draft->weight_bytes()) / static_cast<double>(target.weight_bytes()),
                     0.75, 64);
}

}  // namespace tally
