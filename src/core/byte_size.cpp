#include "core/byte_size.h"

#include <fmt/format.h>

#include <cctype>
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

namespace {

// "4.9" -> (49, 1): the digits without the point, and how many followed it;
// nullopt for anything else (a sign, two points, no digits, more than 12
// decimals). More than 36 digits mark it too large instead.
struct Decimal {
  unsigned __int128 digits = 0;
  int decimals = 0;
  bool too_large = false;
};
std::optional<Decimal> parse_decimal(std::string_view s) {
  Decimal d;
  bool point = false, any = false;
  int n = 0;
  for (char c : s) {
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    any = true;
    if (d.digits == 0 && c == '0' && !point) continue;  // leading zeros
    if (++n > 36) {
      d.too_large = true;
      continue;
    }
    d.digits = d.digits * 10 + static_cast<unsigned>(c - '0');
    if (point && ++d.decimals > 12) return std::nullopt;
  }
  if (!any) return std::nullopt;
  return d;
}

// value x scale, rounded to the nearest whole; nullopt past 64 bits. *exact: no rounding was needed.
std::optional<uint64_t> scaled(const Decimal& d, uint64_t scale, bool* exact) {
  if (d.too_large) return std::nullopt;
  unsigned __int128 den = 1;
  for (int i = 0; i < d.decimals; ++i) den *= 10;
  const unsigned __int128 whole = d.digits / den, frac = d.digits % den;
  if (whole > UINT64_MAX) return std::nullopt;
  const unsigned __int128 num_whole = whole * scale;
  if (num_whole > UINT64_MAX) return std::nullopt;
  const unsigned __int128 frac_scaled = frac * scale;  // < 10^12 x 2^40: fits
  if (exact) *exact = frac_scaled % den == 0;
  const unsigned __int128 v = num_whole + (frac_scaled + den / 2) / den;
  if (v > UINT64_MAX) return std::nullopt;
  return static_cast<uint64_t>(v);
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// The number and its unit: "24 GiB" -> ("24", "GiB").
std::pair<std::string_view, std::string_view> split_unit(std::string_view t) {
  size_t n = 0;
  while (n < t.size() && ((t[n] >= '0' && t[n] <= '9') || t[n] == '.')) ++n;
  return {t.substr(0, n), trim(t.substr(n))};
}

}  // namespace

uint64_t parse_byte_count(std::string_view text, std::string_view what) {
  const auto [number, unit] = split_unit(trim(text));
  struct Unit {
    const char* name;
    uint64_t scale;
  };
  static constexpr Unit kByteUnits[] = {{"", 1},
                                        {"B", 1},
                                        {"KiB", 1ull << 10},
                                        {"MiB", 1ull << 20},
                                        {"GiB", 1ull << 30},
                                        {"TiB", 1ull << 40},
                                        {"KB", 1000ull},
                                        {"MB", 1000ull * 1000},
                                        {"GB", 1000ull * 1000 * 1000},
                                        {"TB", 1000ull * 1000 * 1000 * 1000}};
  uint64_t scale = 0;
  for (const Unit& u : kByteUnits)
    if (iequals(unit, u.name)) scale = u.scale;
  const auto d = parse_decimal(number);
  if (!d || scale == 0)
    fail("{} '{}' is not a byte count; give bytes, or a number with a unit: KB, MB, GB, TB (powers of 1000) or "
         "KiB, MiB, GiB, TiB (powers of 1024), e.g. 24GB or 4.5GiB",
         what, excerpt(text));
  if (d->decimals > 0 && scale == 1) fail("{} '{}': a number of bytes is whole", what, excerpt(text));
  const auto bytes = scaled(*d, scale, nullptr);
  if (!bytes) fail("{} '{}' overflows 64 bits", what, excerpt(text));
  if (*bytes == 0) fail("{} is zero bytes", what);
  return *bytes;
}

uint64_t parse_token_count(std::string_view text, std::string_view what) {
  const auto [number, unit] = split_unit(trim(text));
  uint64_t scale = 0;
  if (unit.empty()) scale = 1;
  else if (unit == "k" || unit == "K") scale = 1ull << 10;
  else if (unit == "m" || unit == "M") scale = 1ull << 20;
  const auto d = parse_decimal(number);
  if (!d || scale == 0)
    fail("{} '{}' is not a number of tokens; give a whole number, or one with k (x 1024) or M (x 1048576), e.g. "
         "8k or 128K",
         what, excerpt(text));
  bool exact = false;
  const auto tokens = scaled(*d, scale, &exact);
  if (!tokens) fail("{} '{}' overflows 64 bits", what, excerpt(text));
  if (!exact) fail("{} '{}' is not a whole number of tokens", what, excerpt(text));
  return *tokens;
}

}  // namespace tally
