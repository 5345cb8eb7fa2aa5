#pragma once
// What this machine can do at most, measured rather than assumed, so that a
// benchmark's "% of the limit" is honest: the memory read bandwidth (streaming
// a buffer far larger than the caches) and the f32 FMA peak, each with N threads.
namespace tally {

struct MachineLimits {
  int threads = 1;
  double read_gbps = 0;  // GB/s (10^9 bytes)
  double fma_gflops = 0; // GFLOP/s, 2 flops per FMA lane
  const char* simd = "";
};

MachineLimits probe_machine(int threads);

}  // namespace tally
