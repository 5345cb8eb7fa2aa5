#include "core/byte_size.h"

#include <fmt/format.h>

#include <charconv>
#include <utility>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/printable.h"

namespace tally {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::optional<uint64_t> parse_whole(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

namespace {

const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};

// bytes in the largest binary unit that leaves a value below `limit`: (value, unit index).
std::pair<double, int> in_units(uint64_t bytes, double limit) {
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= limit && u < 6) {
    v /= 1024;
    ++u;
  }
  return {v, u};
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  const auto [v, u] = in_units(bytes, 1024);
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{} B ({:.2f} {})", bytes, v, kUnits[u]);
}

std::string format_bytes_short(uint64_t bytes) {
  const auto [v, u] = in_units(bytes, 1000);  // "1000 KiB" reads as "0.98 MiB"
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", v, v < 10 ? 2 : v < 100 ? 1 : 0, kUnits[u]);
}

uint64_t parse_byte_count(std::string_view text, std::string_view what) {
  const std::string_view t = trim(text);
  size_t digits = 0;
  while (digits < t.size() && t[digits] >= '0' && t[digits] <= '9') ++digits;
  const std::string_view unit = trim(t.substr(digits));
  uint64_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1ull << 10;
  else if (unit == "MiB") scale = 1ull << 20;
  else if (unit == "GiB") scale = 1ull << 30;
  else if (unit == "TiB") scale = 1ull << 40;
  const auto v = parse_whole(t.substr(0, digits));
  if (!v || scale == 0)
    fail("{} '{}' is not a byte count; give a whole number of bytes, optionally with KiB, MiB, GiB or TiB", what,
         excerpt(text));
  if (*v == 0) fail("{} is zero bytes", what);
  const auto bytes = checked_mul(*v, scale);
  if (!bytes) fail("{} '{}' overflows 64 bits", what, excerpt(text));
  return *bytes;
}

}  // namespace tally
