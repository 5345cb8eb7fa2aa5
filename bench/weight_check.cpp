// What the load-time weight check costs: the pass over every tensor's block
// scales and float values (first_non_finite) against a whole Model::load of
// the same file, each the best of N runs, in CPU time of the thread (less
// disturbed by other work on a shared machine than wall time). The file's
// pages are read once before timing, so both figures are with a warm page
// cache (a cold load adds the disk's time, which the first forward pass
// would otherwise pay).
//
// usage: weight_check MODEL.gguf|HF_DIR [RUNS]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/byte_size.h"
#include "core/dtype.h"
#include "model/hf_folder.h"
#include "kernels/dequantize.h"
#include "model/model.h"

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: weight_check MODEL.gguf|HF_DIR [RUNS]\n");
    return 2;
  }
  const std::string path = argv[1];
  const int runs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  try {
    const auto file = tally::open_model_file(path);
    uint64_t bytes = 0, tensors = 0, sum = 0;
    for (const auto& t : file->tensors()) {  // warm the page cache
      for (uint64_t i = 0; i < t.n_bytes; i += 4096) sum += t.data[i];
      bytes += t.n_bytes;
    }
    double scan = 1e30, load = 1e30;
    for (int r = 0; r < runs; ++r) {
      const double t0 = cpu_seconds();
      tensors = 0;
      for (const auto& t : file->tensors()) {
        if (!tally::traits(t.type).supported) continue;
        sum += static_cast<uint64_t>(tally::first_non_finite(t.type, t.data, t.n_elements) + 1);
        ++tensors;
      }
      scan = std::min(scan, cpu_seconds() - t0);
      const double t1 = cpu_seconds();
      const auto m = tally::Model::load(path);
      load = std::min(load, cpu_seconds() - t1);
    }
    std::printf("%s: %llu tensors, %s; check %.1f ms, whole load %.1f ms (check included), best of %d; CPU time\n",
                path.c_str(), static_cast<unsigned long long>(tensors), tally::format_bytes(bytes).c_str(), scan * 1e3,
                load * 1e3, runs);
    return sum == 42 ? 1 : 0;  // keeps the reads
  } catch (const std::exception& e) {
    std::fprintf(stderr, "weight_check: %s\n", e.what());
    return 1;
  }
}
