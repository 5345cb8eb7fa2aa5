#include "core/number_text.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "core/byte_size.h"
#include "core/printable.h"

namespace tally {

std::optional<int64_t> parse_integer(std::string_view s) {
  s = trim(s);
  bool negative = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  const auto magnitude = parse_whole(s);  // digits only
  if (!magnitude) return std::nullopt;
  if (negative) {
    if (*magnitude > uint64_t{1} << 63) return std::nullopt;
    return static_cast<int64_t>(0 - *magnitude);  // two's complement: -2^63 included
  }
  if (*magnitude > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(*magnitude);
}

std::optional<double> parse_real(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  // Digits, one point, an exponent: from_chars would also take "inf", "nan" and hex.
  if (s.empty()) return std::nullopt;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E')) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

namespace {

// [+-]digits: a whole number, whatever its size.
bool integer_syntax(std::string_view s) {
  s = trim(s);
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

std::string integer_error(std::string_view what, std::string_view text, int64_t min, int64_t max) {
  const auto v = parse_integer(text);
  if (v && *v >= min && *v <= max) return "";
  if (!integer_syntax(text)) return fmt::format("{} '{}' is not a whole decimal number", what, excerpt(text, 40));
  return fmt::format("{} {} is out of range ({} to {})", what, excerpt(trim(text), 40), min, max);
}

std::string unsigned_error(std::string_view what, std::string_view text, uint64_t max) {
  const auto v = parse_whole(trim(text));
  if (v && *v <= max) return "";
  if (!integer_syntax(text)) return fmt::format("{} '{}' is not a whole decimal number", what, excerpt(text, 40));
  return fmt::format("{} {} is out of range (0 to {})", what, excerpt(trim(text), 40), max);
}

std::string real_error(std::string_view what, std::string_view text, double min, double max) {
  const auto v = parse_real(text);
  if (!v) return fmt::format("{} '{}' is not a finite decimal number", what, excerpt(text, 40));
  if (*v < min || *v > max) return fmt::format("{} {} is out of range ({:g} to {:g})", what, *v, min, max);
  return "";
}

}  // namespace tally
