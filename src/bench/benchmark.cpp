#include "bench/benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "kv/kv_shape.h"
#include "runtime/session.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void mean_stddev(const std::vector<double>& v, double& mean, double& sd) {
  mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  sd = v.size() > 1 ? std::sqrt(ss / static_cast<double>(v.size() - 1)) : 0;
}

// Deterministic ordinary tokens (the content does not change the work).
std::vector<int32_t> filler(int64_t n, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(1000 + (i * 7919) % std::max<int64_t>(1, vocab - 1000));
  return t;
}

}  // namespace

uint64_t matmul_macs_per_token(const Model& m) {
  const auto& c = m.config();
  uint64_t per_layer = 0;
  const LayerWeights& L = m.layer(0);
  for (const WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down})
    per_layer += static_cast<uint64_t>(w->rows) * w->cols;
  return per_layer * c.n_layer + static_cast<uint64_t>(m.output().rows) * m.output().cols;
}

std::vector<BenchRow> run_benchmark(const Model& model, const BenchOptions& o, const std::vector<MachineLimits>& limits,
                                    const std::function<void(const BenchRow&)>& on_row) {
  if (o.reps < 1) fail("-r must be at least 1, got {}", o.reps);
  if (o.n_prompt < 0 || o.n_gen < 0) fail("-p and -n must be >= 0");
  if (o.threads.empty() || o.depths.empty()) fail("give at least one thread count and one depth");
  const auto& c = model.config();
  const int64_t max_depth = *std::max_element(o.depths.begin(), o.depths.end());
  const uint64_t kv_tok = kv_bytes_per_token({c.n_layer, c.n_kv_head, c.head_dim}, o.cache_type);
  const double weights = static_cast<double>(model.weight_bytes());
  const double macs = static_cast<double>(matmul_macs_per_token(model));
  const auto tokens = filler(max_depth + std::max(o.n_prompt, o.n_gen) + 1, c.n_vocab);
  std::vector<BenchRow> rows;

  for (int t : o.threads) {
    const MachineLimits* lim = nullptr;
    for (const auto& l : limits)
      if (l.threads == t) lim = &l;
    SessionOptions so;
    so.n_ctx = max_depth + std::max(o.n_prompt, o.n_gen) + 1;
    so.n_batch = std::max<int64_t>(1, o.n_prompt);
    so.n_threads = t;
    so.cache_type = o.cache_type;
    Session s(model, so);
    std::vector<int64_t> depths = o.depths;
    std::sort(depths.begin(), depths.end());
    for (int64_t d : depths) {
      if (d < 0) fail("depth must be >= 0, got {}", d);
      if (s.length() > d) s.truncate(d);
      if (s.length() < d) s.append(std::span<const int32_t>(tokens).subspan(s.length(), d - s.length()));
      if (o.n_prompt > 0) {
        std::vector<double> tps;
        for (int r = 0; r < o.reps; ++r) {
          s.truncate(d);
          const auto t0 = Clock::now();
          s.append(std::span<const int32_t>(tokens).subspan(d, o.n_prompt));
          tps.push_back(static_cast<double>(o.n_prompt) / seconds_since(t0));
        }
        BenchRow row;
        row.test = fmt::format("pp{}", o.n_prompt);
        row.threads = t;
        row.depth = d;
        mean_stddev(tps, row.tps_mean, row.tps_stddev);
        const double avg_keys = static_cast<double>(d) + (o.n_prompt + 1) / 2.0;
        row.flops_per_token = 2 * macs + 4.0 * c.n_layer * c.n_head * c.head_dim * avg_keys;
        row.gflops = row.flops_per_token * row.tps_mean / 1e9;
        row.pct_limit = lim && lim->fma_gflops > 0 ? 100 * row.gflops / lim->fma_gflops : 0;
        rows.push_back(row);
        if (on_row) on_row(row);
      }
      if (o.n_gen > 0) {
        std::vector<double> tps;
        for (int r = 0; r < o.reps; ++r) {
          s.truncate(d);
          int32_t tok = tokens[d];
          const auto t0 = Clock::now();
          for (int64_t i = 0; i < o.n_gen; ++i) {
            s.append(std::span<const int32_t>(&tok, 1));
            tok = tokens[d + i + 1];
          }
          tps.push_back(static_cast<double>(o.n_gen) / seconds_since(t0));
        }
        BenchRow row;
        row.test = fmt::format("tg{}", o.n_gen);
        row.threads = t;
        row.depth = d;
        mean_stddev(tps, row.tps_mean, row.tps_stddev);
        row.bytes_per_token = weights + static_cast<double>(kv_tok) * (static_cast<double>(d) + (o.n_gen + 1) / 2.0);
        row.gbps = row.bytes_per_token * row.tps_mean / 1e9;
        row.pct_limit = lim && lim->read_gbps > 0 ? 100 * row.gbps / lim->read_gbps : 0;
        rows.push_back(row);
        if (on_row) on_row(row);
      }
    }
  }
  return rows;
}

}  // namespace tally
