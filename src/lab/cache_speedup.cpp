#include "lab/cache_speedup.h"

#include <chrono>

#include "core/error.h"
#include "runtime/generator.h"

namespace tally {
namespace {

struct Trace {
  std::vector<int32_t> tokens;
  std::vector<double> elapsed_ms;  // after each emitted token, from the start of the prefill
};

Trace trace(const Model& model, std::span<const int32_t> prompt, int64_t n, bool use_cache, int threads,
            const std::function<void(int64_t emitted)>& on_token) {
  SessionOptions o;
  o.n_ctx = static_cast<int64_t>(prompt.size()) + n;
  o.n_threads = threads;
  Session s(model, o);
  GenerateOptions g;
  g.max_tokens = n;
  g.use_cache = use_cache;
  g.sampling.temperature = 0;
  Trace t;
  const auto t0 = std::chrono::steady_clock::now();
  generate(s, prompt, g, [&](const Emission& e) {
    t.tokens.push_back(e.token);
    t.elapsed_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    on_token(static_cast<int64_t>(t.tokens.size()));
  });
  return t;
}

}  // namespace

SpeedupReport measure_cache_speedup(const Model& model, std::span<const int32_t> prompt, int64_t gen_tokens,
                                    std::span<const int64_t> checkpoints, int n_threads,
                                    const std::function<void(int64_t done, int64_t total)>& progress) {
  if (gen_tokens < 1) fail("--gen-tokens must be at least 1, got {}", gen_tokens);
  // Positions computed: the cached run p + k after k tokens; recomputing, step k computes p + k - 1.
  const auto p = static_cast<int64_t>(prompt.size()), n = gen_tokens;
  const int64_t cached_work = p + n, total = cached_work + n * p + n * (n - 1) / 2;
  auto report = [&](int64_t done) {
    if (progress) progress(done, total);
  };
  const Trace cached = trace(model, prompt, n, true, n_threads, [&](int64_t k) { report(p + k); });
  const Trace recomputed =
      trace(model, prompt, n, false, n_threads, [&](int64_t k) { report(cached_work + k * p + k * (k - 1) / 2); });
  SpeedupReport r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  r.same_tokens = cached.tokens == recomputed.tokens;
  int64_t prev = 0;
  for (int64_t n : checkpoints) {
    if (n < 1 || n > gen_tokens) continue;
    SpeedupPoint p;
    p.n = n;
    p.cache_total_ms = cached.elapsed_ms[n - 1];
    p.nocache_total_ms = recomputed.elapsed_ms[n - 1];
    const double c0 = prev ? cached.elapsed_ms[prev - 1] : 0, r0 = prev ? recomputed.elapsed_ms[prev - 1] : 0;
    p.cache_ms_per_token = (p.cache_total_ms - c0) / static_cast<double>(n - prev);
    p.nocache_ms_per_token = (p.nocache_total_ms - r0) / static_cast<double>(n - prev);
    p.ratio = p.nocache_total_ms / p.cache_total_ms;
    r.points.push_back(p);
    prev = n;
  }
  return r;
}

}  // namespace tally
