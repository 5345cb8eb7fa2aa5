#pragma once
// Numbers written as text (command-line flags, lists), read strictly: the
// whole text, spaces and tabs around it aside, is one decimal number. Nothing
// wraps (-1 is not a huge unsigned number), nothing saturates or is clamped,
// and there is no octal or hex ("010" is ten). Parsers return nullopt on any
// other text; the *_error functions say why in one line, or "" when it is fine.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tally {

// [+-]digits, within int64.
std::optional<int64_t> parse_integer(std::string_view s);
// A finite decimal number ("0.7", "-2", "1e-3"); no inf, nan or hex floats.
std::optional<double> parse_real(std::string_view s);

// `what` names the flag. Ranges are inclusive.
std::string integer_error(std::string_view what, std::string_view text, int64_t min, int64_t max);
std::string unsigned_error(std::string_view what, std::string_view text, uint64_t max);
std::string real_error(std::string_view what, std::string_view text, double min, double max);

}  // namespace tally
