// Attention per GQA group size: the time of one decode step's attention for
// one KV head (attend_group over DEPTH cached positions) with 1 to 16 query
// heads sharing it, per cache type and SIMD level; median of 31 runs of 10.
// Shows that every group size takes the SIMD kernels (per-head time flat).
//
// usage: attention_groups [DEPTH] [HEAD_DIM]     (defaults 4096 and 64)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/kernel_table.h"
#include "kv/kv_cache.h"

using namespace tally;

int main(int argc, char** argv) {
  const int64_t depth = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int64_t hd = argc > 2 ? std::atoll(argv[2]) : 64;
  if (depth < 1 || hd < 32 || hd % 32 != 0) {
    std::fprintf(stderr, "attention_groups: DEPTH must be >= 1 and HEAD_DIM a multiple of 32\n");
    return 2;
  }
  const int groups[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 14, 16};
  std::printf("depth %lld, head size %lld: microseconds per head (per group / query heads in it)\n%-18s",
              static_cast<long long>(depth), static_cast<long long>(hd), "heads:");
  for (int n_q : groups) std::printf("%7d", n_q);
  std::printf("\n");
  for (SimdLevel level : {SimdLevel::Avx2, SimdLevel::Avx512Vnni}) {
    if (!simd_native(level)) continue;
    for (DType type : {DType::F16, DType::Q8_0, DType::Q4_0}) {
      KvCache cache(KvShape{1, 1, hd}, KvCacheOptions{depth, 32, type, uint64_t{1} << 30});
      const auto seq = cache.create_sequence();
      cache.begin_write(seq, 0, depth);
      std::mt19937 rng(1);
      std::uniform_real_distribution<float> u(-1, 1);
      std::vector<float> k(hd), v(hd);
      for (int64_t p = 0; p < depth; ++p) {
        for (auto& e : k) e = u(rng);
        for (auto& e : v) e = u(rng);
        cache.store(0, seq, p, k.data(), v.data());
      }
      const KvLayerView kv = cache.view(0, seq);
      std::printf("%-12s %-5s", simd_level_name(level), std::string(dtype_name(type)).c_str());
      for (int n_q : groups) {
        std::vector<float> q(n_q * hd), out(n_q * hd), scratch(attention_scratch_floats(n_q, hd, depth));
        for (auto& e : q) e = u(rng);
        std::vector<double> t;
        for (int r = 0; r < 31; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < 10; ++i)
            kernels_at(level).attention(kv).group(kv, AttendArgs{q.data(), n_q, 0, 0.125f}, KeyRange::causal(depth),
                                                  scratch.data(), out.data());
          t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 10);
        }
        std::nth_element(t.begin(), t.begin() + 15, t.end());
        std::printf("%7.1f", t[15] / n_q);
      }
      std::printf("\n");
    }
  }
}
