#include "bench/machine_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/simd_avx2.h"
#include "core/thread_pool.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;

#if TALLY_HAVE_X86
// Streams p with 4 independent sums, asking for the lines 8 KiB ahead as the
// matrix kernels do: the probe then reads as fast as they can (two cores
// read ~12% more with it on AMD Zen 5).
TALLY_AVX2 uint64_t read_sum_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 8192), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 8192 + 64), _MM_HINT_T0);
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
  return out[0] + out[1] + out[2] + out[3];
}

// 8 independent FMA chains of 8 lanes hide the FMA latency.
TALLY_AVX2 float fma_loop_avx2(int64_t iters) {
  __m256 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm256_set1_ps(0.001f * k);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < 8; ++k) acc[k] = _mm256_fmadd_ps(acc[k], a, b);
  __m256 s = acc[0];
  for (int k = 1; k < 8; ++k) s = _mm256_add_ps(s, acc[k]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0];
}

// The same with 16 lanes, for CPUs whose widest FMA is AVX-512's.
__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
  __m512 acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = _mm512_set1_ps(0.001f * k);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < 8; ++k) acc[k] = _mm512_fmadd_ps(acc[k], a, b);
  __m512 s = acc[0];
  for (int k = 1; k < 8; ++k) s = _mm512_add_ps(s, acc[k]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0];
}
#endif

uint64_t read_sum(const uint8_t* p, size_t n) {
#if TALLY_HAVE_X86
  if (simd_at_least(SimdLevel::Avx2)) return read_sum_avx2(p, n);
#endif
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= n; i += 64) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s += v;
  }
  return s;
}

}  // namespace

MachineLimits probe_machine(int threads) {
  MachineLimits m;
  m.threads = threads;
  m.simd = simd_level_name(simd_level());
  ThreadPool pool(threads);

  // Bandwidth: 512 MiB, first touched by the threads that read it, best of 3 passes.
  const size_t bytes = size_t{512} << 20;
  std::unique_ptr<uint8_t[], void (*)(uint8_t*)> buf(static_cast<uint8_t*>(std::aligned_alloc(64, bytes)),
                                                     [](uint8_t* p) { std::free(p); });
  const int64_t chunks = 1024;
  const size_t chunk = bytes / chunks;
  pool.parallel_for(chunks, [&](int64_t b, int64_t e, int) { std::memset(buf.get() + b * chunk, 1, (e - b) * chunk); });
  std::vector<uint64_t> sink(threads);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = Clock::now();
    pool.parallel_for(chunks, [&](int64_t b, int64_t e, int w) { sink[w] += read_sum(buf.get() + b * chunk, (e - b) * chunk); });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / s / 1e9);
  }
  m.read_gbps = best;

  // FMA peak at the widest vectors the kernels may use: each thread runs the
  // same loop; 8 chains x 8 (or 16) lanes x 2 flops per iteration.
  const bool wide = simd_at_least(SimdLevel::Avx512Vnni);
  const int64_t iters = 20'000'000;
  std::vector<float> fsink(threads);
  const auto t0 = Clock::now();
  pool.parallel_for(threads, [&](int64_t b, int64_t e, int w) {
    for (int64_t i = b; i < e; ++i) {
#if TALLY_HAVE_X86
      if (wide) {
        fsink[w] += fma_loop_avx512(iters);
        continue;
      }
      if (simd_at_least(SimdLevel::Avx2)) {
        fsink[w] += fma_loop_avx2(iters);
        continue;
      }
#endif
      float acc = 0;
      for (int64_t k = 0; k < iters * 8; ++k) acc = acc * 0.999999f + 1e-7f;
      fsink[w] += acc;
    }
  });
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double lanes = wide ? 128.0 : simd_at_least(SimdLevel::Avx2) ? 64.0 : 1.0;
  m.fma_gflops = static_cast<double>(threads) * iters * lanes * 2 / s / 1e9;
  return m;
}

}  // namespace tally
