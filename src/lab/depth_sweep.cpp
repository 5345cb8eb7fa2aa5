#include "lab/depth_sweep.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "kv/kv_shape.h"
#include "runtime/session.h"
#include "sampler/sampler.h"

namespace tally {

DepthReport measure_depth(const Model& model, std::span<const int32_t> filler, std::span<const int64_t> depths,
                          int64_t decode_steps, DType cache_type, int n_threads,
                          const std::function<void(int64_t done, int64_t total)>& progress) {
  if (filler.empty()) fail("depth sweep needs filler tokens");
  if (decode_steps < 1) fail("decode steps must be at least 1, got {}", decode_steps);
  if (depths.empty()) fail("no depths given");
  const auto& c = model.config();
  const int64_t max_depth = *std::max_element(depths.begin(), depths.end());
  if (*std::min_element(depths.begin(), depths.end()) < 0) fail("depths must be >= 0");
  SessionOptions o;
  o.n_ctx = max_depth + decode_steps + 1;
  o.cache_type = cache_type;
  o.n_threads = n_threads;
  Session s(model, o);

  DepthReport r;
  r.kv_bytes_per_token = kv_bytes_per_token({c.n_layer, c.n_kv_head, c.head_dim}, cache_type);
  r.weight_bytes = model.weight_bytes();
  r.crossover_context = static_cast<int64_t>((r.weight_bytes + r.kv_bytes_per_token - 1) / r.kv_bytes_per_token);

  std::vector<int64_t> sorted(depths.begin(), depths.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<int32_t> fill;
  const int64_t total = max_depth + decode_steps * static_cast<int64_t>(sorted.size());
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int64_t d = sorted[i];
    if (progress) progress(s.length() + decode_steps * static_cast<int64_t>(i), total);
    while (static_cast<int64_t>(fill.size()) < d) fill.push_back(filler[fill.size() % filler.size()]);
    if (s.length() < d) s.append(std::span<const int32_t>(fill).subspan(s.length(), d - s.length()));
    int32_t tok = filler[d % filler.size()];
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < decode_steps; ++i) tok = argmax(s.append(std::span<const int32_t>(&tok, 1)));
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    s.truncate(d);  // roll back the timed steps: the next depth continues from the filler
    DepthPoint p;
    p.depth = d;
    p.ms_per_token = ms / static_cast<double>(decode_steps);
    p.decode_tps = 1000.0 / p.ms_per_token;
    p.kv_bytes_read = r.kv_bytes_per_token * static_cast<uint64_t>(d);
    p.weight_bytes_read = r.weight_bytes;
    r.points.push_back(p);
  }
  return r;
}

}  // namespace tally
