#include "lab/sinks_experiment.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "runtime/generator.h"
#include "runtime/session.h"

namespace tally {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// -log p(next) from one row of logits.
double nll(const float* logits, int64_t n_vocab, int32_t next) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < n_vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  return mx + std::log(sum) - logits[next];
}

// Accumulates negative log-likelihoods into per-1000 segments.
struct Scores {
  std::vector<double> sum;
  std::vector<int64_t> count;
  std::vector<double> at;  // by position (NaN: not scored)
  void add(int64_t position, double v) {
    if (at.size() <= static_cast<size_t>(position)) at.resize(static_cast<size_t>(position) + 1, NAN);
    at[static_cast<size_t>(position)] = v;
    const size_t seg = static_cast<size_t>(position / 1000);
    if (sum.size() <= seg) sum.resize(seg + 1, 0), count.resize(seg + 1, 0);
    sum[seg] += v;
    ++count[seg];
  }
  void into(SinksRow& r) const {
    double all = 0;
    int64_t n = 0;
    for (size_t i = 0; i < sum.size(); ++i) {
      r.ppl.push_back(count[i] ? std::exp(sum[i] / static_cast<double>(count[i])) : 0.0);
      all += sum[i];
      n += count[i];
    }
    r.scored = n;
    r.ppl_all = n ? std::exp(all / static_cast<double>(n)) : 0.0;
  }
  // Perplexity at positions first, first + every, ... (those scored).
  double sampled(int64_t first, int64_t every) const {
    double s = 0;
    int64_t n = 0;
    for (int64_t p = first; p < static_cast<int64_t>(at.size()); p += every)
      if (!std::isnan(at[static_cast<size_t>(p)])) s += at[static_cast<size_t>(p)], ++n;
    return n ? std::exp(s / static_cast<double>(n)) : 0.0;
  }
};

SessionOptions session_for(int64_t n_ctx, int64_t batch, int threads) {
  SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_batch = batch;
  so.n_threads = threads;
  so.all_logits = true;
  return so;
}

// Time per generated token with the cache full (the stream's steady state).
double decode_ms(Session& s, std::span<const int32_t> text, int64_t sinks) {
  GenerateOptions g;
  g.max_tokens = 64;
  g.sinks = sinks;
  g.sampling.temperature = 0;
  const GenerateResult r = generate(s, text.first(1), g);
  return r.decode_steps > 0 ? r.decode_ms / static_cast<double>(r.decode_steps) : 0;
}

}  // namespace

std::vector<SinksRow> measure_sinks(const Model& model, std::span<const int32_t> text, const SinksOptions& o,
                                    const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t n = static_cast<int64_t>(text.size());
  const int64_t V = model.config().n_vocab;
  constexpr int64_t kBlock = 32;
  if (o.window < 4 * kBlock) fail("--window must be at least {}, got {}", 4 * kBlock, o.window);
  for (int64_t s : o.sinks)
    if (s < 0 || s + 2 * kBlock > o.window) fail("--sinks {} does not fit a window of {}", s, o.window);
  if (o.recompute_every < 1) fail("--recompute-every must be at least 1, got {}", o.recompute_every);
  if (n < o.window + 2) fail("the text has {} tokens; it must be longer than the window of {}", n, o.window);
  std::vector<SinksRow> rows;
  const int64_t configs = static_cast<int64_t>(o.sinks.size()) + (o.dense ? 1 : 0) + 1;
  int64_t done = 0;
  auto tick = [&](int64_t pos) {
    if (progress) progress(done * n + pos, configs * n);
  };

  if (o.dense) {
    SinksRow r;
    r.config = "dense";
    Session s(model, session_for(n, 512, o.n_threads));
    Scores sc;
    for (int64_t p = 0; p + 1 < n; p += 512) {
      const int64_t m = std::min<int64_t>(512, n - 1 - p);
      s.append(text.subspan(static_cast<size_t>(p), static_cast<size_t>(m)), [&](int64_t pos, const float* l, int64_t rows) {
        for (int64_t j = 0; j < rows; ++j) sc.add(pos + j, nll(l + j * V, V, text[pos + j + 1]));
      });
      tick(p);
    }
    sc.into(r);
    r.ppl_sampled = sc.sampled(o.window - 1, o.recompute_every);
    s.truncate(std::min<int64_t>(s.length(), o.window));  // decode speed at the window's depth, for comparison
    r.decode_ms_per_token = decode_ms(s, text.subspan(static_cast<size_t>(s.length())), -1);
    rows.push_back(r);
    ++done;
  }

  for (int64_t sinks : o.sinks) {
    SinksRow r;
    r.config = sinks == 0 ? "window" : "sinks " + std::to_string(sinks);
    r.sinks = sinks;
    SessionOptions so = session_for(o.window, kBlock, o.n_threads);
    so.block_size = kBlock;
    Session s(model, so);
    Scores sc;
    for (int64_t p = 0; p + 1 < n; p += kBlock) {  // p: the text position (the cache's is p less what slid out)
      const int64_t m = std::min<int64_t>(kBlock, n - 1 - p);
      s.slide(m, sinks);
      s.append(text.subspan(static_cast<size_t>(p), static_cast<size_t>(m)), [&](int64_t, const float* l, int64_t rows) {
        for (int64_t j = 0; j < rows; ++j) sc.add(p + j, nll(l + j * V, V, text[p + j + 1]));
      });
      if (p % 512 == 0) tick(p);
    }
    sc.into(r);
    r.ppl_sampled = sc.sampled(o.window - 1, o.recompute_every);
    r.decode_ms_per_token = decode_ms(s, text.subspan(static_cast<size_t>(n - 1)), sinks);
    rows.push_back(r);
    ++done;
  }

  {  // The slow, accurate baseline: the latest window - 1 tokens evaluated afresh for each token scored.
    SinksRow r;
    r.config = "recompute";
    Session s(model, session_for(o.window, 512, o.n_threads));
    Scores sc;
    double ms = 0;
    int64_t evals = 0;
    for (int64_t p = o.window; p + 1 < n; p += o.recompute_every) {
      s.truncate(0);
      const auto t0 = Clock::now();
      const auto l = s.append(text.subspan(static_cast<size_t>(p - o.window + 1), static_cast<size_t>(o.window - 1)));
      ms += ms_since(t0);
      ++evals;
      sc.add(p - 1, nll(l.data(), V, text[p]));
      tick(p);
    }
    sc.into(r);
    r.ppl_sampled = r.ppl_all;
    r.decode_ms_per_token = evals ? ms / static_cast<double>(evals) : 0;
    rows.push_back(r);
  }
  return rows;
}

}  // namespace tally
