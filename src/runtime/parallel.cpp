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
                                 const std::function<void(int, int32_t)>& on_token) {
  if (n < 1) fail("--parallel must be at least 1, got {}", n);
  if (o.max_tokens < 0) fail("token limit must be >= 0, got {}", o.max_tokens);
  if (!o.use_cache) fail("parallel sampling shares the prompt's cache; it has no no-cache mode");
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
  std::vector<Sampler> samplers;
  for (int i = 0; i < n; ++i) {
    SamplerParams p = o.sampling;
    p.seed += static_cast<uint64_t>(i);
    samplers.emplace_back(p);
  }
  std::vector<bool> active(static_cast<size_t>(n), true);
  int remaining = n;
  for (int i = 0; i < n; ++i) {
    r.continuations[i].prompt_tokens = static_cast<int64_t>(prompt.size());
    r.continuations[i].prefill_ms = prefill_ms;
  }
  auto finish = [&](int i, GenerateResult::Stop why) {
    r.continuations[i].stop = why;
    r.continuations[i].decode_ms = ms_since(t0);
    e.release(ids[i]);
    active[i] = false;
    --remaining;
  };
  while (remaining > 0) {
    for (int i = 0; i < n; ++i) {
      if (!active[i] || !e.ready(ids[i])) continue;
      GenerateResult& g = r.continuations[i];
      if (static_cast<int64_t>(g.tokens.size()) >= o.max_tokens) {
        finish(i, GenerateResult::Stop::MaxTokens);
        continue;
      }
      const int32_t next = samplers[i].sample(e.logits(ids[i]), e.tokens(ids[i]));
      if (o.is_stop && o.is_stop(next)) {
        finish(i, GenerateResult::Stop::EndToken);
        continue;
      }
      g.tokens.push_back(next);
      if (on_token) on_token(i, next);
      if (static_cast<int64_t>(g.tokens.size()) >= o.max_tokens) {
        finish(i, GenerateResult::Stop::MaxTokens);
      } else if (e.room(ids[i]) == 0) {
        finish(i, GenerateResult::Stop::ContextFull);
      } else {
        e.push(ids[i], next);
        ++g.decode_steps;
      }
    }
    if (remaining == 0) break;
    r.peak_held_bytes = std::max(r.peak_held_bytes, e.held_bytes());
    e.step();
    for (int i = 0; i < n; ++i)
      if (active[i] && e.stopped(ids[i])) finish(i, GenerateResult::Stop::ContextFull);
  }
  return r;
}

}  // namespace tally
