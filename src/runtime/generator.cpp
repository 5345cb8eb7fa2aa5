#include "runtime/generator.h"

#include <chrono>
#include <limits>
#include <optional>

#include "core/error.h"

namespace tally {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The decode loop with drafts (prompt lookup, or a draft model): each step
// evaluates the token chosen last and up to k guesses after it in one pass
// (k + 1 rows of logits), keeps the guesses the generation step takes, and
// rolls the cache back over the others. A step's time counts the draft's.
template <class Emit>
void speculate(Session& s, Generation& gen, const GenerateOptions& o, std::span<const float> logits,
               std::vector<int32_t>& history, GenerateResult& r, DraftModel* draft, Emit&& emit) {
  const PromptLookup lookup;
  // A draft of the target's family agrees often; the counts correct a wrong prior in a few steps.
  DraftLength length = draft_length(o.draft_max, s.model(), draft == nullptr ? nullptr : &o.draft->model());
  const int64_t V = s.model().config().n_vocab;
  auto take = [&](const std::optional<Emission>& e) {
    if (!e) return;
    r.tokens.push_back(e->token);
    history.push_back(e->token);
    emit(*e);
  };
  take(gen.step(logits, history, s.n_ctx() - s.length()));
  std::vector<int32_t> batch;
  for (;;) {
    if (!gen.finished() && o.cancel != nullptr && o.cancel->load()) gen.end(Finish::Cancelled);
    if (gen.finished()) break;
    const int64_t base = s.length();  // the cache holds history but its last token
    const int64_t fit = s.n_ctx() - base - 1;  // guesses that fit after it
    const int64_t k = std::min(o.fixed_draft ? o.draft_max : length.next(), fit);
    batch.assign(1, gen.next());
    double catch_up = 0;  // seconds
    if (k > 0 && draft != nullptr) {
      // After steps without guesses the draft evaluates the tokens it missed
      // at once: a cost of the pause, not of this step's guesses. It counts
      // as the two positions a draft evaluates after a step with guesses.
      const auto tf = std::chrono::steady_clock::now();
      const int64_t n = draft->follow(history);
      catch_up = ms_since(tf) / 1000 * (n > 2 ? 2.0 / static_cast<double>(n) : 1.0);
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Guess> drafted;
    if (k > 0 && draft != nullptr) {
      drafted = draft->propose(history, k);
    } else if (k > 0) {
      for (int32_t t : lookup.propose(history, k)) drafted.push_back(Guess{t, {}});
    }
    for (const Guess& g : drafted) batch.push_back(g.token);
    const float* rows = nullptr;
    logits = s.append(batch, [&](int64_t, const float* l, int64_t) { rows = l; },
                      static_cast<int64_t>(drafted.size()));
    const double seconds = ms_since(t0) / 1000 + catch_up;
    ++r.decode_steps;
    const int64_t guesses = static_cast<int64_t>(batch.size()) - 1;
    int64_t kept = 0;
    for (int64_t j = 0; j <= guesses; ++j) {
      const std::span<const float> row(rows + j * V, static_cast<size_t>(V));
      const int64_t room = s.n_ctx() - (base + j + 1);
      const bool guessed = j < guesses;
      take(guessed ? gen.step(row, history, room, drafted[static_cast<size_t>(j)]) : gen.step(row, history, room));
      if (!guessed || !gen.took_guess()) break;
      ++kept;  // the guess is in the cache already
      if (gen.finished()) break;
    }
    length.record(guesses, kept, seconds);
    r.drafted += guesses;
    r.accepted += kept;
    const int64_t keep = base + 1 + kept;
    if (s.length() > keep) {
      const int64_t bs = s.cache().block_size();
      r.rolled_back_blocks += (s.length() - 1) / bs - keep / bs + 1;
      r.rolled_back += s.length() - keep;
      s.truncate(keep);
    }
  }
  if (draft != nullptr) r.draft_rolled_back = draft->rolled_back();
}
}  // namespace

GenerateResult generate(Session& s, std::span<const int32_t> prompt, const GenerateOptions& o,
                        const std::function<void(const Emission&)>& on_emit, const Tokenizer* tok) {
  if (prompt.empty()) fail("the prompt is empty: nothing to generate from");
  if (o.max_tokens < -1) fail("token limit must be >= 0 (or -1: none), got {}", o.max_tokens);
  if (o.max_tokens == -1 && o.sinks < 0) fail("generating with no token limit needs a sliding window (sink tokens)");
  if (o.sinks >= 0 && !o.use_cache) fail("a sliding window slides the cache; it has no no-cache mode");
  if (o.sinks >= 0) s.check_window(o.sinks);
  if (o.draft_max < 0) fail("the draft length must be >= 0, got {}", o.draft_max);
  if (o.draft_max > 0 && (o.sinks >= 0 || !o.use_cache))
    fail("speculative decoding rolls back the cache: not with a sliding window or without a cache");
  if (o.draft_max > 0 && s.engine().logit_rows() < o.draft_max + 1)
    fail("a draft of {} tokens needs {} rows of logits per step; this session keeps {} (SessionOptions::logit_rows)",
         o.draft_max, o.draft_max + 1, s.engine().logit_rows());
  if (o.draft != nullptr && o.draft_max == 0) fail("a draft model guesses for speculative decoding: set draft_max");
  if (o.draft != nullptr && o.draft->n_ctx() < s.n_ctx())
    fail("the draft model's context ({}) is shorter than the target's ({}): it must hold every token the target does",
         o.draft->n_ctx(), s.n_ctx());
  GenerateResult r;
  if (o.sinks >= 0 && s.length() + static_cast<int64_t>(prompt.size()) > s.n_ctx())
    r.slid += s.slide(static_cast<int64_t>(prompt.size()), o.sinks);
  if (s.length() + static_cast<int64_t>(prompt.size()) > s.n_ctx())
    fail("the prompt has {} tokens, more than the {} left in the context of {}", prompt.size(),
         s.n_ctx() - s.length(), s.n_ctx());
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  auto t0 = std::chrono::steady_clock::now();  // the prefill's time counts loading a prefix from disk
  if (s.length() == 0 && s.engine().cache().disk_tier() && o.sinks < 0) {
    r.cached_tokens = s.reuse_prefix(prompt);
    r.disk_tokens = s.disk_tokens();
    prompt = prompt.subspan(static_cast<size_t>(r.cached_tokens));
  }
  Generation gen(o, tok);
  // The no-cache baseline still needs the full sequence to recompute from.
  std::vector<int32_t> history(s.tokens());
  auto emit = [&](const Emission& e) {
    r.text += e.text;
    if (on_emit) on_emit(e);
  };

  std::span<const float> logits = s.append(prompt);
  history.insert(history.end(), prompt.begin(), prompt.end());
  std::optional<DraftModel> draft;
  if (o.draft != nullptr) {
    draft.emplace(*o.draft, o.sampling, o.draft_vocab);
    draft->follow(history);  // the draft's prefill, beside the target's
  }
  r.prefill_ms = ms_since(t0);

  t0 = std::chrono::steady_clock::now();
  if (o.draft_max > 0) {
    speculate(s, gen, o, logits, history, r, draft ? &*draft : nullptr, emit);
  } else {
    for (;;) {
      // A sliding window always has room: it drops old positions instead.
      const int64_t room = o.sinks >= 0 ? std::numeric_limits<int64_t>::max() : s.n_ctx() - s.length();
      const std::optional<Emission> e = gen.step(logits, history, room);
      if (e) {
        r.tokens.push_back(e->token);
        history.push_back(e->token);
        if (o.sinks >= 0 && history.size() > 4096)  // a stream runs forever: keep what the penalties look at
          history.erase(history.begin(), history.end() - 1024);
        emit(*e);
      }
      if (!gen.finished() && o.cancel != nullptr && o.cancel->load()) gen.end(Finish::Cancelled);
      if (gen.finished()) break;
      const int32_t next = gen.next();
      if (o.sinks >= 0) r.slid += s.slide(1, o.sinks);
      if (o.use_cache) {
        logits = s.append(std::span<const int32_t>(&next, 1));  // decode: position = cache length
      } else {
        s.truncate(0);
        logits = s.append(history);
      }
      ++r.decode_steps;
    }
  }
  if (const std::optional<Emission> t = gen.tail()) emit(*t);
  r.stop = gen.finish();
  r.decode_ms = ms_since(t0);
  return r;
}

}  // namespace tally
