#include "runtime/engine.h"

#include <algorithm>
#include <new>
#include <utility>

#include "core/error.h"
#include "io/session_file.h"
#include "kernels/kv_quant.h"
#include "kernels/ops.h"
#include "kv/run_options.h"

namespace tally {

int64_t effective_context(const Model& model, int64_t requested) {
  if (requested < 0) fail("context size must be positive, got {}", requested);
  if (requested == 0) return std::min<int64_t>(4096, model.config().n_ctx_train);
  return requested;
}

namespace {

KvCacheOptions cache_options(const Model& m, const EngineOptions& o) {
  const auto& c = m.config();
  std::vector<bool> window_layers(static_cast<size_t>(c.n_layer), false);
  for (int64_t l = 0; l < c.n_layer; ++l) window_layers[static_cast<size_t>(l)] = c.window_layer(l);
  KvCacheOptions k = run_cache_options(effective_context(m, o.n_ctx), o.cache_type, c.window, std::move(window_layers),
                                       o.max_sequences, o.step_tokens);
  k.block_size = o.block_size;
  k.budget_bytes = o.kv_budget;
  k.prefix_cache = o.prefix_cache;
  k.disk = o.disk;
  k.model_fingerprint = m.fingerprint();
  return k;
}

int threads_for(int requested) {
  if (requested < 0) fail("thread count must be positive, got {}", requested);
  return requested == 0 ? ThreadPool::default_threads() : requested;
}

const EngineOptions& checked(const EngineOptions& o) {
  if (o.step_tokens < 1) fail("a step's token budget must be at least 1, got {}", o.step_tokens);
  if (o.max_sequences < 1) fail("a step needs room for at least 1 sequence, got {}", o.max_sequences);
  return o;
}

}  // namespace

Engine::Engine(const Model& model, const EngineOptions& o) try
    : model_(model),
      pool_(checked(o).threads ? o.threads : std::make_shared<ThreadPool>(threads_for(o.n_threads))),
      cache_(model.kv_shape(), cache_options(model, o)),
      // A step takes at most the budget and never more than the pool holds.
      forward_(model, *pool_, std::min(o.step_tokens, cache_.n_ctx()), cache_.n_ctx(),
               o.all_logits ? std::min(o.step_tokens, cache_.n_ctx())
                            : std::clamp<int64_t>(std::max(o.max_sequences, o.logit_rows), 1,
                                                  std::min(o.step_tokens, cache_.n_ctx()))),
      step_tokens_(std::min(o.step_tokens, cache_.n_ctx())),
      max_sequences_(std::clamp<int64_t>(o.max_sequences, 1, std::min(o.step_tokens, cache_.n_ctx()))) {
  entries_.reserve(static_cast<size_t>(max_sequences_));
  entry_slot_.reserve(static_cast<size_t>(max_sequences_));
  ready_.reserve(static_cast<size_t>(max_sequences_));
} catch (const std::bad_alloc&) {
  fail("cannot allocate an engine with a context of {} tokens and steps of {} tokens: lower the context or the batch",
       effective_context(model, o.n_ctx), o.step_tokens);
}

const Engine::Seq& Engine::get(Id id) const {
  if (id.slot < 0 || id.slot >= static_cast<int32_t>(seqs_.size()) || !seqs_[id.slot].live ||
      seqs_[id.slot].gen != id.gen)
    fail("no running sequence {} (generation {}): it was released or never admitted", id.slot, id.gen);
  return seqs_[id.slot];
}
Engine::Seq& Engine::get(Id id) { return const_cast<Seq&>(std::as_const(*this).get(id)); }

Engine::Id Engine::new_slot() {
  size_t slot = 0;
  while (slot < seqs_.size() && seqs_[slot].live) ++slot;
  if (slot == seqs_.size()) seqs_.emplace_back();
  Seq& s = seqs_[slot];
  const uint32_t gen = s.gen + 1;
  std::vector<float> keep = std::move(s.logits);  // the slot's buffer is reused
  s = Seq{};
  s.logits = std::move(keep);
  s.logits.clear();
  s.live = true;
  s.gen = gen;
  s.order = next_order_++;
  return {static_cast<int32_t>(slot), gen};
}

int64_t Engine::committed_blocks() const {
  int64_t n = 0;
  for (const Seq& s : seqs_) {
    if (!s.live || s.stopped) continue;
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    n += s.kv ? cache_.blocks_needed(*s.kv, len) : cache_.blocks_for(len);
  }
  return n;
}

bool Engine::can_admit(int64_t n_tokens) const {
  return n_tokens >= 1 && n_tokens <= cache_.n_ctx() &&
         cache_.blocks_for(n_tokens) <= cache_.allocator().available_blocks() - committed_blocks();
}

void Engine::check_fits(int64_t n, int64_t prompt, int64_t max_tokens, const char* what) const {
  const int64_t shared = prompt / cache_.block_size();  // the prompt's full blocks
  const int64_t each = cache_.blocks_for(prompt + max_tokens) - shared;
  const int64_t need = shared + n * each;
  const int64_t pool = cache_.allocator().total_blocks();
  if (n > pool || need > pool)
    fail("{}: {} sequences of up to {} new tokens after a {}-token prompt need up to {} KV blocks of {} positions, "
         "and the pool holds {} (a larger context, or fewer sequences)",
         what, n, max_tokens, prompt, need, cache_.block_size(), pool);
}

Engine::Admission Engine::admit(std::span<const int32_t> prompt, int64_t max_len) {
  if (prompt.empty()) fail("a sequence needs at least one token");
  if (max_len < 0 || max_len > cache_.n_ctx())
    fail("a sequence of at most {} positions does not fit the pool of {}", max_len, cache_.n_ctx());
  if (max_len == 0) max_len = cache_.n_ctx();
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n > max_len) fail("a prompt of {} tokens exceeds the sequence's maximum of {} positions", n, max_len);
  const int32_t n_vocab = static_cast<int32_t>(model_.config().n_vocab);
  for (int32_t t : prompt)
    if (t < 0 || t >= n_vocab) fail("token id {} is outside the vocabulary [0, {})", t, n_vocab);
  Admission a;
  // The last token is always evaluated: its logits are what the caller reads.
  const KvCache::PrefixProbe hit = cache_.probe_prefix(prompt, n - 1);
  const int64_t need = cache_.blocks_for(n) - hit.positions / cache_.block_size();
  // Blocks the admitted sequences' pending tokens will take are spoken for.
  const int64_t available = cache_.allocator().available_blocks() - hit.evictable_blocks - committed_blocks();
  if (need > available) {
    a.refusal = fmt::format("the KV pool cannot hold a prompt of {} tokens now: {} more blocks needed, {} free",
                            n, need, available);
    return a;
  }
  const Id id = new_slot();
  Seq& s = seqs_[id.slot];
  s.kv = cache_.create_sequence_from_prefix(prompt, n - 1, max_len, &s.from_disk);
  s.tokens.assign(prompt.begin(), prompt.end());
  s.evaluated = s.cached = cache_.length(*s.kv);
  s.max_len = max_len;
  a.id = id;
  a.cached_tokens = s.cached;
  a.disk_tokens = s.from_disk;
  return a;
}

Engine::Id Engine::fork(Id src) { return adopt(src, cache_.fork(*ready_seq(src).kv)); }

Engine::Id Engine::fork_copy(Id src) { return adopt(src, cache_.fork_copy(*ready_seq(src).kv)); }

const Engine::Seq& Engine::ready_seq(Id id) const {
  if (!ready(id)) fail("sequence {} has tokens still to evaluate; fork it once it is ready", id.slot);
  return get(id);
}

Engine::Id Engine::adopt(Id src, KvCache::SeqId kv) {
  const Id id = new_slot();  // may move seqs_: src is read after it
  Seq& s = seqs_[id.slot];
  const Seq& from = get(src);
  s.kv = kv;
  s.tokens = from.tokens;
  s.evaluated = from.evaluated;
  s.max_len = from.max_len;
  s.cached = from.cached;
  s.logits = from.logits;
  return id;
}

void Engine::push(Id id, int32_t token) {
  Seq& s = get(id);
  // Ready, or truncated since (its logits gone, nothing pending).
  if (!s.kv || s.evaluated != static_cast<int64_t>(s.tokens.size()) || s.tokens.empty())
    fail("sequence {} has tokens still to evaluate", id.slot);
  if (static_cast<int64_t>(s.tokens.size()) >= s.max_len)
    fail("sequence {} is at its maximum of {} positions", id.slot, s.max_len);
  if (token < 0 || token >= model_.config().n_vocab)
    fail("token id {} is outside the vocabulary [0, {})", token, model_.config().n_vocab);
  s.tokens.push_back(token);
  s.logits.clear();
}

void Engine::push(Id id, int32_t token, std::span<const int32_t> guesses) {
  push(id, token);
  Seq& s = get(id);
  if (static_cast<int64_t>(s.tokens.size() + guesses.size()) > s.max_len)
    fail("sequence {}: {} guesses after the token pass its maximum of {} positions", id.slot, guesses.size(), s.max_len);
  for (int32_t t : guesses)
    if (t < 0 || t >= model_.config().n_vocab)
      fail("token id {} is outside the vocabulary [0, {})", t, model_.config().n_vocab);
  s.tokens.insert(s.tokens.end(), guesses.begin(), guesses.end());
  s.guesses = static_cast<int64_t>(guesses.size());
}

void Engine::drop_guesses(Seq& s, int64_t keep) {
  if (s.guesses <= keep) return;
  s.tokens.resize(s.tokens.size() - static_cast<size_t>(s.guesses - keep));
  s.guesses = keep;
}

void Engine::release(Id id) {
  Seq& s = get(id);
  if (s.kv) cache_.free_sequence(*s.kv);
  const uint32_t gen = s.gen;
  std::vector<float> keep = std::move(s.logits);
  s = Seq{};
  s.gen = gen;
  s.logits = std::move(keep);
}

bool Engine::ready(Id id) const {
  const Seq& s = get(id);
  return s.kv && s.evaluated == static_cast<int64_t>(s.tokens.size()) && !s.logits.empty();
}
bool Engine::stopped(Id id) const { return get(id).stopped; }

std::span<const float> Engine::logits(Id id) const {
  const std::span<const float> rows = guess_logits(id);
  return rows.last(static_cast<size_t>(model_.config().n_vocab));
}

std::span<const float> Engine::guess_logits(Id id) const {
  if (!ready(id)) fail("sequence {} has no logits yet: it has tokens still to evaluate", id.slot);
  return get(id).logits;
}

const std::vector<int32_t>& Engine::tokens(Id id) const { return get(id).tokens; }
int64_t Engine::cached_tokens(Id id) const { return get(id).cached; }
int64_t Engine::disk_tokens(Id id) const { return get(id).from_disk; }
int64_t Engine::room(Id id) const {
  const Seq& s = get(id);
  return s.max_len - static_cast<int64_t>(s.tokens.size());
}

int64_t Engine::running() const {
  return std::count_if(seqs_.begin(), seqs_.end(), [](const Seq& s) { return s.live; });
}

int64_t Engine::prefill_tokens() const {
  int64_t n = 0;
  for (const Seq& s : seqs_)
    if (s.live && !s.stopped && s.kv && !s.decoding()) n += s.pending();
  return std::min(n, step_tokens_);
}

uint64_t Engine::block_bytes() const {
  return 2 * cache_.storage().block_bytes() * static_cast<uint64_t>(model_.config().n_layer);
}
uint64_t Engine::held_bytes() const {
  // Full layers per block in use; window layers per window slot in use.
  const KvCacheStats st = cache_.stats();
  const uint64_t per_layer = 2 * cache_.storage().block_bytes();
  const auto window_layers = static_cast<uint64_t>(cache_.storage().n_window_layers());
  return static_cast<uint64_t>(st.blocks_used) * per_layer * (static_cast<uint64_t>(model_.config().n_layer) - window_layers) +
         static_cast<uint64_t>(st.window_slots_used) * per_layer * window_layers;
}

void Engine::preempt(Seq& s) {
  drop_guesses(s, 0);  // evaluated again as a prompt, they would come back without their rows
  cache_.free_sequence(*s.kv);
  s.kv.reset();
  s.evaluated = 0;
  s.logits.clear();
  ++counters_.preemptions;
}

bool Engine::resume(Seq& s) {
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  const KvCache::PrefixProbe hit = cache_.probe_prefix(s.tokens, n - 1);
  if (cache_.blocks_for(n) - hit.positions / cache_.block_size() >
      cache_.allocator().available_blocks() - hit.evictable_blocks)
    return false;
  s.kv = cache_.create_sequence_from_prefix(s.tokens, n - 1, s.max_len);
  s.evaluated = cache_.length(*s.kv);
  return true;
}

std::span<const Engine::Id> Engine::step() {
  ready_.clear();
  // Preempted sequences come back first, oldest first, while the pool has room for them.
  std::vector<int32_t>& order = order_;
  order.clear();
  for (size_t i = 0; i < seqs_.size(); ++i)
    if (seqs_[i].live && !seqs_[i].stopped) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return seqs_[a].order < seqs_[b].order; });
  for (int32_t i : order)
    if (!seqs_[i].kv && !resume(seqs_[i])) break;

  auto entry = [&](const Seq& s, int64_t n, LogitsMode mode) {
    return StepEntry{*s.kv, std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.evaluated), n),
                     s.evaluated, mode, mode == LogitsMode::All ? s.guesses : 0};
  };
  // Decodes (one pending token after the prompt, with its guesses), then
  // prefill chunks, oldest first, within the budget. Every entry has a row of
  // logits; guesses take the rows beyond one per sequence.
  int64_t budget = step_tokens_, guess_rows = forward_.logit_rows() - max_sequences_;
  entries_.clear();
  entry_slot_.clear();
  for (int pass = 0; pass < 2; ++pass)
    for (int32_t i : order) {
      Seq& s = seqs_[i];
      if (pass == 0 && s.guesses > 0 && s.kv) {
        drop_guesses(s, std::clamp<int64_t>(std::min(guess_rows, budget - 1), 0, s.guesses));
        guess_rows -= s.guesses;
      }
      const int64_t p = s.pending();
      if (!s.kv || p == 0 || s.decoding() != (pass == 0) || budget == 0 ||
          static_cast<int64_t>(entries_.size()) == max_sequences_)
        continue;
      const int64_t n = std::min(p, budget);
      entries_.push_back(entry(s, n, s.guesses > 0 ? LogitsMode::All : n == p ? LogitsMode::Last : LogitsMode::None));
      entry_slot_.push_back(i);
      budget -= n;
    }

  // Capacity: drop the newest entries' claims until the step fits; a decode that
  // cannot fit preempts the newest sequence that holds blocks. (With window
  // layers a step also needs a window slot per block; admission counts only
  // blocks, since a long prompt's early blocks give their slots back as its
  // prefill moves on.)
  auto needed = [&] {
    int64_t need = 0;
    for (const StepEntry& e : entries_)
      need += cache_.blocks_needed(e.seq, e.start + static_cast<int64_t>(e.tokens.size()));
    return need;
  };
  while (!entries_.empty() && needed() > cache_.available_blocks()) {
    const size_t last = entries_.size() - 1;
    Seq& s = seqs_[entry_slot_[last]];
    if (s.guesses > 0) {  // a decode first gives up its guesses
      drop_guesses(s, 0);
      entries_[last] = entry(s, 1, LogitsMode::Last);
      continue;
    }
    if (!s.decoding()) {  // its guesses are gone: a chunk of a prompt, whole or not
      entries_.pop_back();  // a prefill chunk waits for a later step
      entry_slot_.pop_back();
      continue;
    }
    // Decodes only: preempt the newest running sequence (possibly this one).
    int32_t victim = -1;
    for (int32_t i : order)
      if (seqs_[i].kv && (victim < 0 || seqs_[i].order > seqs_[victim].order)) victim = i;
    const bool alone = std::count_if(order.begin(), order.end(), [&](int32_t i) { return seqs_[i].kv.has_value(); }) == 1;
    if (alone) {  // the whole pool cannot hold this sequence one position longer
      s.stopped = true;
      entries_.pop_back();
      entry_slot_.pop_back();
      continue;
    }
    const auto at = std::find(entry_slot_.begin(), entry_slot_.end(), victim);
    if (at != entry_slot_.end()) {
      entries_.erase(entries_.begin() + (at - entry_slot_.begin()));
      entry_slot_.erase(at);
    }
    preempt(seqs_[victim]);
  }
  if (entries_.empty()) return ready_;

  forward_.step(cache_, entries_);
  ++counters_.steps;
  const int64_t V = model_.config().n_vocab;
  for (size_t e = 0; e < entries_.size(); ++e) {
    Seq& s = seqs_[entry_slot_[e]];
    s.evaluated += static_cast<int64_t>(entries_[e].tokens.size());
    counters_.tokens += entries_[e].tokens.size();
    if (entries_[e].logits != LogitsMode::None) {
      const int64_t rows = entries_[e].logits == LogitsMode::All ? static_cast<int64_t>(entries_[e].tokens.size()) : 1;
      const float* row = forward_.logits() + forward_.logits_row(e) * V;
      s.logits.assign(row, row + rows * V);
      s.guesses = 0;
      ready_.push_back({entry_slot_[e], s.gen});
    }
  }
  return ready_;
}

// --- A sequence evaluated alone -------------------------------------------------------------------

Engine::Id Engine::open(int64_t max_len) {
  if (max_len < 0 || max_len > cache_.n_ctx())
    fail("a sequence of at most {} positions does not fit the pool of {}", max_len, cache_.n_ctx());
  const Id id = new_slot();
  Seq& s = seqs_[id.slot];
  s.max_len = max_len == 0 ? cache_.n_ctx() : max_len;
  s.kv = cache_.create_sequence(s.max_len);
  return id;
}

KvCache::SeqId Engine::kv(Id id) const {
  const Seq& s = get(id);
  if (!s.kv) fail("sequence {} holds no cache now (preempted)", id.slot);
  return *s.kv;
}

std::span<const float> Engine::eval(Id id, std::span<const int32_t> tokens, const LogitsSink& sink, int64_t guesses) {
  Seq& s = get(id);
  if (!s.kv || s.evaluated != static_cast<int64_t>(s.tokens.size()))
    fail("sequence {} has tokens still to evaluate", id.slot);
  if (tokens.empty()) fail("nothing to evaluate: no tokens given");
  const int64_t length = s.evaluated;
  if (length + static_cast<int64_t>(tokens.size()) > s.max_len)
    fail("{} tokens do not fit: the context holds {} and {} are in use", tokens.size(), s.max_len, length);
  const int64_t n_vocab = model_.config().n_vocab;
  for (int32_t t : tokens)  // all chunks or none: an early chunk must not be kept when a later one is bad
    if (t < 0 || t >= n_vocab) fail("token id {} is outside the vocabulary [0, {})", t, n_vocab);
  // With a sink, chunks are no longer than the rows of logits a step keeps.
  const int64_t B = sink ? std::min(forward_.max_tokens(), forward_.logit_rows()) : forward_.max_tokens();
  s.logits.clear();
  for (size_t i = 0; i < tokens.size(); i += static_cast<size_t>(B)) {
    const auto chunk = tokens.subspan(i, std::min<size_t>(static_cast<size_t>(B), tokens.size() - i));
    const int64_t start = s.evaluated;
    const int64_t after = static_cast<int64_t>(tokens.size() - i - chunk.size());  // tokens after this chunk
    forward_.eval(cache_, *s.kv, chunk, start, sink ? LogitsMode::All : LogitsMode::Last,
                  std::clamp<int64_t>(guesses - after, 0, static_cast<int64_t>(chunk.size())));
    s.tokens.insert(s.tokens.end(), chunk.begin(), chunk.end());
    s.evaluated += static_cast<int64_t>(chunk.size());
    counters_.tokens += chunk.size();
    if (sink) sink(start, forward_.logits(), static_cast<int64_t>(chunk.size()));
  }
  const size_t last_row = sink ? (tokens.size() - 1) % static_cast<size_t>(B) : 0;
  return {forward_.logits() + last_row * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab)};
}

void Engine::truncate(Id id, int64_t n) {
  Seq& s = get(id);
  if (!s.kv) fail("sequence {} holds no cache now (preempted)", id.slot);
  if (n < 0 || n > s.evaluated) fail("cannot truncate sequence {} of {} positions to {}", id.slot, s.evaluated, n);
  const int64_t m = cache_.resume_point(*s.kv, n);
  const std::vector<int32_t> again(s.tokens.begin() + m, s.tokens.begin() + n);
  cache_.truncate(*s.kv, m);
  s.tokens.resize(static_cast<size_t>(m));
  s.guesses = 0;
  s.evaluated = m;
  s.logits.clear();
  if (!again.empty()) eval(id, again);
}

int64_t Engine::reuse_prefix(Id id, std::span<const int32_t> tokens) {
  Seq& s = get(id);
  if (!s.kv) fail("sequence {} holds no cache now (preempted)", id.slot);
  const int64_t limit = std::max<int64_t>(0, static_cast<int64_t>(tokens.size()) - 1);
  int64_t own = 0;
  while (own < s.evaluated && own < limit && s.tokens[static_cast<size_t>(own)] == tokens[static_cast<size_t>(own)]) ++own;
  // The prefix cache may hold a longer prefix (blocks of a sequence since released).
  const KvCache::PrefixProbe hit = cache_.probe_prefix(tokens, limit);
  s.from_disk = 0;
  if (hit.positions + hit.disk_positions > own) {
    const int64_t max_len = s.max_len;
    cache_.free_sequence(*s.kv);
    s.kv = cache_.create_sequence_from_prefix(tokens, limit, max_len, &s.from_disk);
    s.evaluated = cache_.length(*s.kv);
    s.tokens.assign(tokens.begin(), tokens.begin() + s.evaluated);
    s.logits.clear();
    return s.evaluated;
  }
  truncate(id, own);
  return get(id).evaluated;
}

void Engine::check_window(Id id, int64_t sinks) const {
  const int64_t bs = cache_.block_size(), window = get(id).max_len;
  if (sinks < 0) fail("the number of sink tokens must be >= 0, got {}", sinks);
  if (sinks + bs + 1 > window)
    fail("a window of {} positions is too small for {} sink tokens: a slide drops a block of {} positions, so the "
         "window needs at least {} (sinks + block + 1)",
         window, sinks, bs, sinks + bs + 1);
}

int64_t Engine::slide(Id id, int64_t need, int64_t sinks) {
  Seq& s = get(id);
  if (!s.kv) fail("sequence {} holds no cache now (preempted)", id.slot);
  const int64_t bs = cache_.block_size(), room = s.max_len;
  check_window(id, sinks);
  if (need < 1 || sinks + bs + need > room)
    fail("a window of {} positions cannot keep {} sinks, slide by a block of {} and take {} new ones", room, sinks, bs,
         need);
  if (s.evaluated + need <= room) return 0;
  const int64_t over = s.evaluated + need - room;
  const int64_t n = (over + bs - 1) / bs * bs;  // whole blocks' worth, so slides are rare
  const auto& c = model_.config();
  // A rotation by -n for each RoPE base (sliding-window layers have their own).
  const size_t half = static_cast<size_t>(c.rope_dims / 2);
  std::vector<float> cs(half), sn(half), cs_swa(half), sn_swa(half);
  rope_angles(-n, c.rope_dims, c.rope_base, cs.data(), sn.data());
  rope_angles(-n, c.rope_dims, c.rope_base_swa, cs_swa.data(), sn_swa.data());
  cache_.remove_positions(*s.kv, sinks, n, [&](int64_t layer, float* k) {
    const bool swa = c.window_layer(layer);
    rope_apply(k, c.n_kv_head, c.head_dim, c.rope_dims, swa ? cs_swa.data() : cs.data(), swa ? sn_swa.data() : sn.data(),
               c.arch->rope_pairing);
  });
  s.tokens.erase(s.tokens.begin() + sinks, s.tokens.begin() + sinks + n);
  s.evaluated -= n;
  return n;
}

void Engine::read_kv(Id id, int64_t layer, int64_t pos, float* k, float* v) const {
  cache_.load(layer, kv(id), pos, k, v);
}

void Engine::save(Id id, const std::string& path, const std::string& meta,
                  const std::function<void(uint32_t)>& after_layer) const {
  const Seq& s = get(id);
  const KvCache::SeqId seq = kv(id);
  const auto& c = model_.config();
  SessionHeader h;
  h.model_fingerprint = model_.fingerprint();
  h.cache_type = cache_.storage().type();
  h.block_size = static_cast<uint32_t>(cache_.block_size());
  h.n_layer = static_cast<uint32_t>(c.n_layer);
  h.n_kv_head = static_cast<uint32_t>(c.n_kv_head);
  h.head_dim = static_cast<uint32_t>(c.head_dim);
  h.n_tokens = static_cast<uint64_t>(s.evaluated);
  h.meta = meta;
  const uint64_t vb = h.vector_bytes();
  write_session_file(
      path, h, std::span<const int32_t>(s.tokens).first(static_cast<size_t>(s.evaluated)),
      [&](uint32_t layer, uint8_t* k, uint8_t* v) {
        for (int64_t p = 0; p < s.evaluated; ++p) {
          if (cache_.holds(layer, seq, p)) {
            cache_.load_raw(layer, seq, p, k + p * vb, v + p * vb);
          } else {  // a sliding-window layer's position out of its window: zeros, never read back
            std::fill_n(k + p * vb, vb, uint8_t{0});
            std::fill_n(v + p * vb, vb, uint8_t{0});
          }
        }
      },
      after_layer);
}

std::string Engine::load(Id id, const std::string& path) {
  const SessionData d = read_session_file(path);
  const SessionHeader& h = d.header;
  const auto& c = model_.config();
  if (h.model_fingerprint != model_.fingerprint())
    fail("{}: the session was saved from another model (fingerprint {:016x}, this model's is {:016x})", path,
         h.model_fingerprint, model_.fingerprint());
  if (h.n_layer != c.n_layer || h.n_kv_head != c.n_kv_head || h.head_dim != c.head_dim)
    fail("{}: the session's cache shape does not match this model", path);
  if (h.cache_type != cache_.storage().type())
    fail("{}: the session holds a {} cache; this one is {} (load it into a {} cache)", path, dtype_name(h.cache_type),
         dtype_name(cache_.storage().type()), kv_cache_type_flag(h.cache_type));
  if (static_cast<int64_t>(h.n_tokens) > get(id).max_len)
    fail("{}: the session holds {} positions, more than this context of {} (load it into a larger context)", path, h.n_tokens,
         get(id).max_len);
  for (int32_t t : d.tokens)
    if (t < 0 || t >= c.n_vocab) fail("{}: token id {} is outside the vocabulary [0, {})", path, t, c.n_vocab);
  truncate(id, 0);
  const KvCache::SeqId seq = kv(id);
  // In steps of a batch, as the forward pass writes: the window layers keep the last window of each.
  // Written without their tokens, so the prefix cache never keys these blocks: where the saving
  // cache had let a window layer's positions go, the file holds zeros, which no lookup may find.
  const int64_t n = static_cast<int64_t>(h.n_tokens), B = forward_.max_tokens();
  for (int64_t start = 0; start < n; start += B) {
    const int64_t end = std::min(n, start + B);
    cache_.begin_write(seq, start, end - start);
    for (uint32_t l = 0; l < h.n_layer; ++l)
      for (int64_t p = start; p < end; ++p)
        cache_.store_raw(l, seq, p, d.k(l, static_cast<uint64_t>(p)), d.v(l, static_cast<uint64_t>(p)));
    cache_.end_write(seq);
  }
  // The file holds a window layer's positions only in its window: older ones
  // (zeros where the saving cache had let them go) must not count as held.
  cache_.trim_window(seq);
  Seq& s = get(id);
  s.tokens = d.tokens;
  s.evaluated = n;
  s.logits.clear();
  return h.meta;
}

}  // namespace tally
