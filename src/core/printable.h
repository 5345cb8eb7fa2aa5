#pragma once
// Untrusted text (file contents, paths, flag values) made safe to show on one
// line of a terminal or inside an error message: control characters (C0, DEL,
// C1), and bytes that are not well-formed UTF-8, become escapes (\n, \t, \r,
// \xNN, \u0085) instead of reaching the terminal, and long text is cut.
#include <cstddef>
#include <string>
#include <string_view>

namespace tally {

struct PrintableOptions {
  // Longest output kept from the input, in input bytes (cut at a character
  // boundary, then "... (N bytes)" says how long the whole was).
  size_t max_bytes = 200;
  // Escape '\\' and '"' too, so that the result reads back unambiguously
  // inside double quotes (off for whole messages that already hold escapes).
  bool escape_quotes = true;
};

std::string printable(std::string_view s, const PrintableOptions& o = {});

// A short excerpt of untrusted text for an error message: printable(s) with
// at most `max_bytes` of it (default 64).
std::string excerpt(std::string_view s, size_t max_bytes = 64);

}  // namespace tally
