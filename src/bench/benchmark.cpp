#include "bench/benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "kernels/group_layout.h"
#include "kv/kv_shape.h"
#include "runtime/session.h"

namespace tally {

std::string limit_summary(const BenchRow& r) {
  if (r.test[0] == 't') return r.pct_limit > 0 ? fmt::format("{:.0f}% of read bandwidth", r.pct_limit) : "";
  if (r.int8_ops_per_token > 0) return r.pct_int8_peak > 0 ? fmt::format("{:.0f}% of int8 peak", r.pct_int8_peak) : "";
  return r.pct_limit > 0 ? fmt::format("{:.0f}% of FMA peak", r.pct_limit) : "";
}

int32_t filler_token(uint64_t k, int64_t n_vocab) {
  const int64_t first = std::min<int64_t>(1000, n_vocab / 4);
  return static_cast<int32_t>(first + static_cast<int64_t>(k % static_cast<uint64_t>(n_vocab - first)));
}

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

std::vector<int32_t> filler(int64_t n, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = filler_token(static_cast<uint64_t>(i) * 7919, vocab);
  return t;
}

}  // namespace

uint64_t matmul_macs_per_token(const Model& m) { return prefill_matmul_macs(m, 1, false); }

bool runs_as_int8(DType t) { return group_supported(t); }

uint64_t prefill_matmul_macs(const Model& m, int64_t n_tokens, bool int8_only) {
  auto macs = [&](const WeightMatrix& w) -> uint64_t {
    return int8_only && !runs_as_int8(w.type) ? 0 : static_cast<uint64_t>(w.rows) * static_cast<uint64_t>(w.cols);
  };
  uint64_t layers = 0;
  for (int64_t l = 0; l < m.config().n_layer; ++l) {
    const LayerWeights& L = m.layer(l);
    for (const WeightMatrix* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.ffn_gate, &L.ffn_up, &L.ffn_down}) layers += macs(*w);
  }
  return layers * static_cast<uint64_t>(n_tokens) + (n_tokens > 0 ? macs(m.output()) : 0);
}

std::vector<BenchRow> run_benchmark(const Model& model, const BenchOptions& o, const std::vector<MachineLimits>& limits,
                                    const std::function<void(const BenchRow&)>& on_row,
                                    const BenchProgress& on_progress) {
  if (o.reps < 1) fail("-r must be at least 1, got {}", o.reps);
  if (o.n_prompt < 0 || o.n_gen < 0) fail("-p and -n must be >= 0");
  if (o.threads.empty() || o.depths.empty()) fail("give at least one thread count and one depth");
  for (int64_t d : o.depths)
    if (d < 0) fail("depth must be >= 0, got {}", d);
  const auto& c = model.config();
  const int64_t max_depth = *std::max_element(o.depths.begin(), o.depths.end());
  const uint64_t kv_tok = kv_bytes_per_token({c.n_layer, c.n_kv_head, c.head_dim}, o.cache_type);
  const double weights = static_cast<double>(model.weight_bytes());
  const auto tokens = filler(max_depth + std::max(o.n_prompt, o.n_gen) + 1, c.n_vocab);
  std::vector<BenchRow> rows;
  const int tests = (o.n_prompt > 0 ? 1 : 0) + (o.n_gen > 0 ? 1 : 0);
  const int64_t total_reps = static_cast<int64_t>(o.threads.size() * o.depths.size()) * tests * o.reps;
  int64_t done_reps = 0;
  auto progress = [&](const std::string& test, int t, int64_t d, const char* step) {
    if (on_progress)
      on_progress(fmt::format("{}, {} thread{}, depth {}: {}", test, t, t == 1 ? "" : "s", d, step), done_reps,
                  total_reps);
  };

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
    // o.reps timed runs of `body` (n tokens each) on top of depth d: the row's speed.
    auto timed = [&](const std::string& test, int64_t d, int64_t n, auto&& body) {
      std::vector<double> tps;
      for (int r = 0; r < o.reps; ++r) {
        progress(test, t, d, fmt::format("rep {}/{}", r + 1, o.reps).c_str());
        s.truncate(d);
        const auto t0 = Clock::now();
        body();
        tps.push_back(static_cast<double>(n) / seconds_since(t0));
        ++done_reps;
      }
      BenchRow row;
      row.test = test;
      row.threads = t;
      row.depth = d;
      mean_stddev(tps, row.tps_mean, row.tps_stddev);
      return row;
    };
    std::vector<int64_t> depths = o.depths;
    std::sort(depths.begin(), depths.end());
    for (int64_t d : depths) {
      if (s.length() > d) s.truncate(d);
      if (s.length() < d) {
        progress("cache", t, d, "filling");
        s.append(std::span<const int32_t>(tokens).subspan(s.length(), d - s.length()));
      }
      if (o.n_prompt > 0) {
        const std::string test = fmt::format("pp{}", o.n_prompt);
        if (o.warmup) {
          progress(test, t, d, "warmup");
          s.append(std::span<const int32_t>(tokens).subspan(d, o.n_prompt));
        }
        BenchRow row =
            timed(test, d, o.n_prompt, [&] { s.append(std::span<const int32_t>(tokens).subspan(d, o.n_prompt)); });
        const double n = static_cast<double>(o.n_prompt);
        const double avg_keys = static_cast<double>(d) + (n + 1) / 2.0;
        row.flops_per_token = 2.0 * static_cast<double>(prefill_matmul_macs(model, o.n_prompt, false)) / n +
                              4.0 * c.n_layer * c.n_head * c.head_dim * avg_keys;
        row.gflops = row.flops_per_token * row.tps_mean / 1e9;
        row.pct_limit = lim && lim->fma_gflops > 0 ? 100 * row.gflops / lim->fma_gflops : 0;
        row.int8_ops_per_token = 2.0 * static_cast<double>(prefill_matmul_macs(model, o.n_prompt, true)) / n;
        row.int8_gops = row.int8_ops_per_token * row.tps_mean / 1e9;
        row.pct_int8_peak = lim && lim->int8_gops > 0 ? 100 * row.int8_gops / lim->int8_gops : 0;
        rows.push_back(row);
        if (on_row) on_row(row);
      }
      if (o.n_gen > 0) {
        const std::string test = fmt::format("tg{}", o.n_gen);
        if (o.warmup) {
          progress(test, t, d, "warmup");
          s.truncate(d);
          s.append(std::span<const int32_t>(tokens).subspan(d, 1));
        }
        BenchRow row = timed(test, d, o.n_gen, [&] {
          for (int64_t i = 0; i < o.n_gen; ++i) s.append(std::span<const int32_t>(tokens).subspan(d + i, 1));
        });
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
