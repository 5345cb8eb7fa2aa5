#include "runtime/parallel.h"

#include <chrono>

#include "core/error.h"
#include "sampler/sampler.h"

namespace tally {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

ParallelResult generate_parallel(Engine& e, std::span<const int32_t> prompt, int n, const GenerateOptions& o,
                                 const std::function<void(int, const Emission&)>& on_emit, const Tokenizer* tok) {
  if (n < 1) fail("the number of continuations must be at least 1, got {}", n);
  if (o.max_tokens < 0) fail("token limit must be >= 0, got {}", o.max_tokens);
  if (!o.use_cache) fail("parallel sampling shares the prompt's cache; it has no no-cache mode");
  e.check_fits(n, static_cast<int64_t>(prompt.size()), o.max_tokens, "parallel sampling");
  ParallelResult r;
  r.continuations.resize(static_cast<size_t>(n));
  auto t0 = std::chrono::steady_clock::now();
  const Engine::Admission a = e.admit(prompt);
  if (!a.id) fail("{}", a.refusal);
  r.cached_prompt_tokens = a.cached_tokens;
  while (!e.ready(*a.id)) e.step();
  const double prefill_ms = ms_since(t0);

  t0 = std::chrono::steady_clock::now();
  std::vector<Engine::Id> ids{*a.id};
  for (int i = 1; i < n; ++i) ids.push_back(e.fork(*a.id));
  std::vector<Generation> gens;
  for (int i = 0; i < n; ++i) {
    GenerationParams p = o;
    p.sampling.seed += static_cast<uint64_t>(i);
    gens.emplace_back(p, tok);
  }
  int remaining = n;
  for (int i = 0; i < n; ++i) {
    r.continuations[i].prompt_tokens = static_cast<int64_t>(prompt.size());
    r.continuations[i].prefill_ms = prefill_ms;
  }
  auto emit = [&](int i, const Emission& em) {
    if (em.token >= 0) r.continuations[i].tokens.push_back(em.token);
    r.continuations[i].text += em.text;
    if (on_emit) on_emit(i, em);
  };
  auto finish = [&](int i) {
    if (const auto t = gens[i].tail()) emit(i, *t);
    r.continuations[i].stop = gens[i].finish();
    r.continuations[i].decode_ms = ms_since(t0);
    e.release(ids[i]);
    --remaining;
  };
  while (remaining > 0) {
    for (int i = 0; i < n; ++i) {
      if (gens[i].finished() || !e.ready(ids[i])) continue;
      if (const auto em = gens[i].step(e.logits(ids[i]), e.tokens(ids[i]), e.room(ids[i]))) emit(i, *em);
      if (gens[i].finished()) {
        finish(i);
      } else {
        e.push(ids[i], gens[i].next());
        ++r.continuations[i].decode_steps;
      }
    }
    if (remaining == 0) break;
    r.peak_held_bytes = std::max(r.peak_held_bytes, e.held_bytes());
    e.step();
    for (int i = 0; i < n; ++i)
      if (!gens[i].finished() && e.stopped(ids[i])) {
        gens[i].end(Finish::ContextFull);
        finish(i);
      }
  }
  return r;
}

}  // namespace tally
