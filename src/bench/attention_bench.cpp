#include "bench/attention_bench.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "core/line_aligned.h"
#include "kernels/attention.h"
#include "kv/kv_cache.h"

namespace tally {
namespace {

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

template <typename F>
double median_ms(int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = thread_cpu_ms();
    f();
    t.push_back(thread_cpu_ms() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

AttentionBenchResult run_attention_benchmark(const AttentionBenchOptions& o) {
  const KvShape& s = o.shape;
  if (s.n_layer < 1 || s.n_kv_head < 1 || s.head_dim < 1 || o.n_head < 1 || o.n_head % s.n_kv_head != 0)
    fail("the attention benchmark needs a model shape with query heads a multiple of kv heads");
  if (o.reps < 1) fail("-r must be at least 1, got {}", o.reps);
  if (o.prefill_queries < 1 || o.prefill_keys < 1) fail("the prefill-like test needs queries and keys");
  int64_t n = o.prefill_keys + o.prefill_queries;
  for (int64_t d : o.depths) {
    if (d < 1) fail("-d values must be at least 1 with --attention, got {}", d);
    n = std::max(n, d);
  }
  KvCache cache(s, KvCacheOptions{n, 32, o.cache_type, 0, false});
  const KvCache::SeqId seq = cache.create_sequence();
  cache.begin_write(seq, 0, n);
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> k(static_cast<size_t>(s.n_kv_head * s.head_dim)), v(k.size());
  for (int64_t l = 0; l < s.n_layer; ++l)
    for (int64_t p = 0; p < n; ++p) {
      for (auto& e : k) e = g(rng);
      for (auto& e : v) e = g(rng);
      cache.store(l, seq, p, k.data(), v.data());
    }
  const int64_t group = o.n_head / s.n_kv_head;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  LineVector<float> q(static_cast<size_t>(o.prefill_queries * group * s.head_dim));
  for (auto& e : q) e = g(rng);
  LineVector<float> out(static_cast<size_t>(group * s.head_dim));
  LineVector<float> scratch(static_cast<size_t>(attention_scratch_floats(group, s.head_dim, n)));

  AttentionBenchResult r;
  for (int64_t d : o.depths) {
    AttentionBenchRow row;
    row.depth = d;
    row.decode_ms = median_ms(o.reps, [&] {
      for (int64_t l = 0; l < s.n_layer; ++l) {
        const KvLayerView kv = cache.view(l, seq);
        for (int64_t h = 0; h < s.n_kv_head; ++h)
          attend_group(kv, AttendArgs{q.data(), group, h, scale}, KeyRange::causal(d), scratch.data(), out.data());
      }
    });
    r.decode.push_back(row);
  }
  const KvLayerView kv0 = cache.view(0, seq);
  r.prefill_ms = median_ms(o.reps, [&] {
    for (int64_t i = 0; i < o.prefill_queries; ++i)
      for (int64_t h = 0; h < s.n_kv_head; ++h)
        attend_group(kv0, AttendArgs{q.data() + i * group * s.head_dim, group, h, scale},
                     KeyRange::causal(o.prefill_keys), scratch.data(), out.data());
  });
  // Query i sits at position prefill_keys + i: it sees the keys before it and itself.
  const int64_t last = o.prefill_keys + o.prefill_queries;
  LineVector<float> tokens_scratch(static_cast<size_t>(attention_tokens_scratch_floats(group, s.head_dim, last)));
  LineVector<float> tokens_out(static_cast<size_t>(kAttentionTokens * group * s.head_dim));
  const int64_t q_stride = group * s.head_dim;
  r.prefill_path_ms = median_ms(o.reps, [&] {
    for (int64_t i = 0; i < o.prefill_queries; i += kAttentionTokens)
      for (int64_t h = 0; h < s.n_kv_head; ++h)
        attend_tokens(kv0, AttendArgs{q.data() + i * q_stride, group, h, scale},
                      QueryRun{std::min(kAttentionTokens, o.prefill_queries - i), q_stride, q_stride},
                      o.prefill_keys + i + 1, tokens_scratch.data(), tokens_out.data());
  });
  return r;
}

}  // namespace tally
