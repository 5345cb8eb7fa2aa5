#include "bench/machine_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "bench/peak_loops.h"
#include "core/thread_pool.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kScalarInt8Chains = 4;

uint64_t read_sum(const uint8_t* p, size_t n) {
  if (simd_at_least(SimdLevel::Avx2)) return probe::read_sum_avx2(p, n);
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= n; i += 64) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s += v;
  }
  return s;
}

float fma_loop_scalar(int64_t iters) {
  float acc = 0;
  for (int64_t k = 0; k < iters * 8; ++k) acc = acc * 0.999999f + 1e-7f;
  return acc;
}

int32_t int8_loop_scalar(int64_t iters) {
  int32_t acc[kScalarInt8Chains] = {0, 1, 2, 3};
  uint8_t u = 3;
  for (int64_t i = 0; i < iters; ++i) {
#if defined(__GNUC__)
    asm volatile("" : "+r"(u));
#endif
    // a different signed factor per chain: four real products per iteration
    for (int64_t k = 0; k < kScalarInt8Chains; ++k) acc[k] += static_cast<int32_t>(u) * static_cast<int32_t>(-2 - k);
  }
  return acc[0] + acc[1] + acc[2] + acc[3];
}

// Runs loop(iters) once on each of `threads` threads; returns the seconds of the whole.
template <class Loop>
double time_on_threads(ThreadPool& pool, int threads, int64_t iters, Loop loop) {
  std::vector<int64_t> sink(threads);
  const auto t0 = Clock::now();
  pool.parallel_for(
      threads,
      [&](int64_t b, int64_t e, int w) {
        for (int64_t i = b; i < e; ++i) sink[w] += static_cast<int64_t>(loop(iters));
      },
      1, ThreadPool::Balance::Static);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Int8Kind int8_kind_for(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512Vnni: return Int8Kind::Vnni512;
    case SimdLevel::Avx2Vnni: return Int8Kind::Vnni256;
    case SimdLevel::Avx2: return Int8Kind::Avx2Maddubs;
    default: return Int8Kind::Scalar;
  }
}

const char* int8_kind_name(Int8Kind k) {
  switch (k) {
    case Int8Kind::Vnni512: return "vpdpbusd 512-bit";
    case Int8Kind::Vnni256: return "vpdpbusd 256-bit";
    case Int8Kind::Avx2Maddubs: return "vpmaddubsw+vpmaddwd 256-bit";
    default: return "scalar";
  }
}

int64_t int8_macs_per_iteration(Int8Kind k) {
  switch (k) {
    case Int8Kind::Vnni512: return probe::kInt8ChainsVnni512 * 64;
    case Int8Kind::Vnni256: return probe::kInt8ChainsVnni256 * 32;
    case Int8Kind::Avx2Maddubs: return probe::kInt8ChainsAvx2 * 32;
    default: return kScalarInt8Chains;
  }
}

double giga_ops_per_second(int threads, int64_t iters, int64_t macs_per_iter, double seconds) {
  if (seconds <= 0) return 0;
  return static_cast<double>(threads) * static_cast<double>(iters) * static_cast<double>(macs_per_iter) * 2.0 /
         seconds / 1e9;
}

MachineLimits probe_machine(int threads) {
  MachineLimits m;
  m.threads = threads;
  // The peak loops run natively: an emulated level (test builds) is probed as the CPU's own.
  const SimdLevel level = simd_native(simd_level()) ? simd_level() : detected_simd_level();
  m.simd = simd_level_name(level);
  ThreadPool pool(threads);

  // Bandwidth: 512 MiB, first touched by the threads that read it, best of 3 passes.
  const size_t bytes = size_t{512} << 20;
  std::unique_ptr<uint8_t[], void (*)(uint8_t*)> buf(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)),
                                                     [](uint8_t* p) { std::free(p); });
  const int64_t chunks = 1024;
  const size_t chunk = bytes / chunks;
  constexpr auto kStatic = ThreadPool::Balance::Static;  // each thread reads the part it touched first
  pool.parallel_for(
      chunks, [&](int64_t b, int64_t e, int) { std::memset(buf.get() + b * chunk, 1, (e - b) * chunk); }, 1, kStatic);
  std::vector<uint64_t> sink(threads);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = Clock::now();
    pool.parallel_for(
        chunks, [&](int64_t b, int64_t e, int w) { sink[w] += read_sum(buf.get() + b * chunk, (e - b) * chunk); }, 1,
        kStatic);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  m.read_gbps = best;

  // FMA peak at the widest vectors the kernels may use: each thread runs the
  // same loop; 8 chains x 8 (or 16) lanes x 2 flops per iteration.
  const int64_t iters = 20'000'000;
  const bool wide = level >= SimdLevel::Avx512Vnni, avx2 = level >= SimdLevel::Avx2;
  const double fs = time_on_threads(pool, threads, iters,
                                    wide ? probe::fma_loop_avx512 : avx2 ? probe::fma_loop_avx2 : fma_loop_scalar);
  const int64_t fma_per_iter = wide ? probe::kFmaChains * 16 : avx2 ? probe::kFmaChains * 8 : 8;
  m.fma_gflops = giga_ops_per_second(threads, iters, fma_per_iter, fs);

  // int8 peak with the instructions the kernels of this level use.
  const Int8Kind kind = int8_kind_for(level);
  m.int8_kind = int8_kind_name(kind);
  int32_t (*int8_loop)(int64_t) = int8_loop_scalar;
  if (kind == Int8Kind::Vnni512) int8_loop = probe::int8_loop_vnni512;
  if (kind == Int8Kind::Vnni256) int8_loop = probe::int8_loop_vnni256;
  if (kind == Int8Kind::Avx2Maddubs) int8_loop = probe::int8_loop_avx2;
  const int64_t int8_iters = kind == Int8Kind::Scalar ? iters * 4 : iters;
  const double is = time_on_threads(pool, threads, int8_iters, int8_loop);
  m.int8_gops = giga_ops_per_second(threads, int8_iters, int8_macs_per_iteration(kind), is);
  return m;
}

}  // namespace tally
