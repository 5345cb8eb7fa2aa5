#include "kv/kv_plan.h"

#include <fmt/format.h>

#include "core/error.h"

namespace tally {

double kv_bytes_per_value(DType type) {
  const auto& t = traits(type);
  return static_cast<double>(t.type_size) / t.block_size;
}

uint64_t kv_bytes_per_token(const KvShape& s, DType type) {
  if (s.n_layer <= 0 || s.n_kv_head <= 0 || s.head_dim <= 0)
    fail("cache shape must be positive (layers {}, kv heads {}, head_dim {})", s.n_layer, s.n_kv_head, s.head_dim);
  const auto& t = traits(type);
  const uint64_t blocks_per_vec = (static_cast<uint64_t>(s.head_dim) + t.block_size - 1) / t.block_size;
  return 2ull * s.n_layer * s.n_kv_head * blocks_per_vec * t.type_size;
}

std::string format_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{} B ({:.2f} {})", bytes, v, units[u]);
}

}  // namespace tally
