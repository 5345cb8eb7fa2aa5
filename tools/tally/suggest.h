#pragma once
// "Did you mean": the name a mistyped word most likely meant, for unknown
// commands, flags and chat commands.
#include <string>
#include <string_view>
#include <vector>

namespace tally::cli {

// The closest of `candidates` to `word` when it is close enough to be a
// likely typo (an edit distance, counting a swap of neighbours as one edit,
// of at most a third of its letters and at least 1; leading dashes and
// slashes are not letters), or else the one candidate `word` is a prefix of;
// "" when neither.
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace tally::cli
