#include "runtime/engine.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "runtime/session.h"

namespace tally {

namespace {

KvCacheOptions cache_options(const Model& m, const EngineOptions& o) {
  KvCacheOptions k;
  k.n_ctx = effective_context(m, o.n_ctx);
  k.block_size = o.block_size;
  k.type = o.cache_type;
  k.budget_bytes = o.kv_budget;
  k.prefix_cache = o.prefix_cache;
  set_cache_window(m, k);
  k.max_sequences = std::max<int64_t>(1, o.max_sequences);
  k.max_batch = std::max<int64_t>(1, o.step_tokens);
  return k;
}

}  // namespace

Engine::Engine(const Model& model, const EngineOptions& o)
    : model_(model),
      pool_(std::make_unique<ThreadPool>(o.n_threads > 0 ? o.n_threads : ThreadPool::default_threads())),
      cache_(model.kv_shape(), cache_options(model, o)),
      forward_(model, *pool_, std::max<int64_t>(1, o.step_tokens), cache_.n_ctx(),
               std::clamp<int64_t>(o.max_sequences, 1, std::max<int64_t>(1, o.step_tokens))),
      step_tokens_(o.step_tokens),
      max_sequences_(std::clamp<int64_t>(o.max_sequences, 1, std::max<int64_t>(1, o.step_tokens))) {
  if (o.n_threads < 0) fail("thread count must be positive, got {}", o.n_threads);
  if (o.step_tokens < 1) fail("a step's token budget must be at least 1, got {}", o.step_tokens);
  if (o.max_sequences < 1) fail("a step needs room for at least 1 sequence, got {}", o.max_sequences);
  entries_.reserve(static_cast<size_t>(max_sequences_));
  entry_slot_.reserve(static_cast<size_t>(max_sequences_));
  ready_.reserve(static_cast<size_t>(max_sequences_));
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
  s.kv = cache_.create_sequence_from_prefix(prompt, n - 1, max_len);
  s.tokens.assign(prompt.begin(), prompt.end());
  s.evaluated = s.cached = cache_.length(*s.kv);
  s.max_len = max_len;
  a.id = id;
  a.cached_tokens = s.cached;
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
  if (!ready(id)) fail("sequence {} has tokens still to evaluate", id.slot);
  if (static_cast<int64_t>(s.tokens.size()) >= s.max_len)
    fail("sequence {} is at its maximum of {} positions", id.slot, s.max_len);
  if (token < 0 || token >= model_.config().n_vocab)
    fail("token id {} is outside the vocabulary [0, {})", token, model_.config().n_vocab);
  s.tokens.push_back(token);
  s.logits.clear();
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
  if (!ready(id)) fail("sequence {} has no logits yet: it has tokens still to evaluate", id.slot);
  return get(id).logits;
}

const std::vector<int32_t>& Engine::tokens(Id id) const { return get(id).tokens; }
int64_t Engine::cached_tokens(Id id) const { return get(id).cached; }
int64_t Engine::room(Id id) const {
  const Seq& s = get(id);
  return s.max_len - static_cast<int64_t>(s.tokens.size());
}

int64_t Engine::running() const {
  return std::count_if(seqs_.begin(), seqs_.end(), [](const Seq& s) { return s.live; });
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

  auto pending = [&](const Seq& s) { return static_cast<int64_t>(s.tokens.size()) - s.evaluated; };
  // Decodes (one pending token after the prompt), then prefill chunks, oldest first, within the budget.
  int64_t budget = step_tokens_;
  entries_.clear();
  entry_slot_.clear();
  for (int pass = 0; pass < 2; ++pass)
    for (int32_t i : order) {
      Seq& s = seqs_[i];
      const int64_t p = pending(s);
      const bool decode = p == 1 && s.evaluated > 0;
      if (!s.kv || p == 0 || decode != (pass == 0) || budget == 0 ||
          static_cast<int64_t>(entries_.size()) == max_sequences_)
        continue;
      const int64_t n = std::min(p, budget);
      entries_.push_back({*s.kv, std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.evaluated), n),
                          s.evaluated, n == p ? LogitsMode::Last : LogitsMode::None});
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
    if (entries_[last].logits == LogitsMode::None || pending(s) > 1 || s.evaluated == 0) {
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
    if (entries_[e].logits == LogitsMode::Last) {
      const float* row = forward_.logits() + forward_.logits_row(e) * V;
      s.logits.assign(row, row + V);
      ready_.push_back({entry_slot_[e], s.gen});
    }
  }
  return ready_;
}

}  // namespace tally
