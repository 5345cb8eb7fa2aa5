#include "bench/parallel_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "bench/benchmark.h"
#include "core/error.h"
#include "runtime/engine.h"

namespace tally {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Prompt i: ordinary tokens, different for every sequence (no prefix is shared).
std::vector<int32_t> prompt(int64_t i, int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k)
    t[k] = filler_token(static_cast<uint64_t>(k * 7919 + i * 104729), vocab);
  return t;
}

}  // namespace

std::vector<ParallelBenchRow> run_parallel_benchmark(
    const Model& model, const ParallelBenchOptions& o, const std::function<void(const ParallelBenchRow&)>& on_row,
    const std::function<void(std::string_view, int64_t, int64_t)>& on_progress) {
  if (o.reps < 1) fail("-r must be at least 1, got {}", o.reps);
  if (o.n_prompt < 1 || o.n_gen < 1) fail("the parallel benchmark needs -p and -n of at least 1");
  for (int64_t n : o.parallel)
    if (n < 1) fail("--parallel values must be at least 1, got {}", n);
  const int64_t vocab = model.config().n_vocab;
  std::vector<ParallelBenchRow> rows;
  const int64_t total = static_cast<int64_t>(o.threads.size() * o.parallel.size()) * o.reps;
  int64_t done = 0;
  for (int t : o.threads)
    for (int64_t n : o.parallel) {
      EngineOptions eo;
      eo.n_ctx = n * (o.n_prompt + o.n_gen + 16);
      eo.block_size = 16;
      eo.step_tokens = std::max(o.step_tokens, n);
      eo.max_sequences = n;
      eo.n_threads = t;
      eo.cache_type = o.cache_type;
      eo.prefix_cache = false;  // every prompt is computed, as llama-batched-bench does
      Engine e(model, eo);
      std::vector<double> pp, tg;
      ParallelBenchRow row;
      row.threads = t;
      row.parallel = n;
      for (int r = 0; r < o.reps; ++r) {
        if (on_progress)
          on_progress(fmt::format("{} sequences, {} thread{}, rep {}/{}", n, t, t == 1 ? "" : "s", r + 1, o.reps), done,
                      total);
        std::vector<Engine::Id> ids;
        for (int64_t i = 0; i < n; ++i) {
          const auto a = e.admit(prompt(i, o.n_prompt, vocab));
          if (!a.id) fail("parallel benchmark: {}", a.refusal);
          ids.push_back(*a.id);
        }
        auto all_ready = [&] { return std::all_of(ids.begin(), ids.end(), [&](auto id) { return e.ready(id); }); };
        auto t0 = Clock::now();
        while (!all_ready()) e.step();
        pp.push_back(static_cast<double>(n * o.n_prompt) / seconds_since(t0));
        t0 = Clock::now();
        for (int64_t k = 0; k < o.n_gen; ++k) {
          for (size_t i = 0; i < ids.size(); ++i) e.push(ids[i], filler_token(static_cast<uint64_t>(k + 31 * i) % 500, vocab));
          do e.step();
          while (!all_ready());
          row.peak_kv_bytes = std::max(row.peak_kv_bytes, e.held_bytes());
        }
        tg.push_back(static_cast<double>(n * o.n_gen) / seconds_since(t0));
        for (auto id : ids) e.release(id);
        ++done;
      }
      row.prefill_tps = median(pp);
      row.decode_tps = median(tg);
      row.ms_per_step = 1000.0 * static_cast<double>(n) / row.decode_tps;
      rows.push_back(row);
      if (on_row) on_row(row);
    }
  return rows;
}

PrefixHitRow measure_prefix_hit(const Model& model, int64_t n_prompt, int64_t cached, int threads, int reps) {
  if (cached < 1 || cached >= n_prompt) fail("--ttft {} must be between 1 and -p {} minus 1", cached, n_prompt);
  if (reps < 1) fail("-r must be at least 1, got {}", reps);
  const int64_t vocab = model.config().n_vocab;
  PrefixHitRow row;
  row.threads = threads;
  row.n_prompt = n_prompt;
  row.cached = cached;
  EngineOptions eo;
  eo.n_ctx = 2 * n_prompt + 64;
  eo.block_size = 16;
  eo.step_tokens = 512;
  eo.n_threads = threads;
  std::vector<double> cold, warm;
  auto first_token_ms = [&](Engine& e, const std::vector<int32_t>& p) {
    const auto t0 = Clock::now();
    const auto a = e.admit(p);
    if (!a.id) fail("prefix-cache benchmark: {}", a.refusal);
    while (!e.ready(*a.id)) e.step();
    const double ms = 1000 * seconds_since(t0);
    row.hit_tokens = a.cached_tokens;
    e.release(*a.id);
    return ms;
  };
  for (int r = 0; r < reps; ++r) {
    // Cold: an engine that has seen nothing. Warm: the same prompt's first
    // `cached` tokens were evaluated by an earlier (released) sequence.
    const std::vector<int32_t> full = prompt(r, n_prompt, vocab);
    {
      Engine e(model, eo);
      cold.push_back(first_token_ms(e, full));
    }
    Engine e(model, eo);
    std::vector<int32_t> head(full.begin(), full.begin() + cached);
    head.push_back(0);  // the earlier sequence went on differently after the shared part
    first_token_ms(e, head);
    warm.push_back(first_token_ms(e, full));
  }
  row.cold_ms = median(cold);
  row.warm_ms = median(warm);
  return row;
}

}  // namespace tally
