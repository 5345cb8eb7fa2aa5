#include "suggest.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tally::cli {
namespace {

// Optimal string alignment: insertions, deletions, substitutions and
// transpositions of neighbours each cost 1 (a typo's usual shapes).
// Three rows of the table (a transposition looks two rows back), not all of
// them: a mistyped word costs three allocations, not one a letter.
size_t distance(std::string_view a, std::string_view b) {
  std::vector<size_t> before(b.size() + 1), prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) cur[j] = std::min(cur[j], before[j - 2] + 1);
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.size() > 64) return "";  // no name is that long; and the table grows with the word
  // Without its dashes (or a chat command's slash) the word is what was typed:
  // "-x" against "-c" is not a typo worth naming.
  size_t letters = word.size();
  while (letters > 0 && (word[word.size() - letters] == '-' || word[word.size() - letters] == '/')) --letters;
  if (letters < 2) return "";
  const size_t allowed = std::max<size_t>(1, letters / 3);
  std::string best;
  size_t best_d = SIZE_MAX;
  std::string only_prefix;
  int prefixes = 0;
  for (const std::string& c : candidates) {
    if (c.size() > word.size() && c.compare(0, word.size(), word) == 0) ++prefixes, only_prefix = c;
    // The distance is at least the difference in length: no table for a name that far.
    if ((c.size() > word.size() ? c.size() - word.size() : word.size() - c.size()) > allowed) continue;
    const size_t d = distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (best_d > 0 && best_d <= allowed) return best;
  if (prefixes == 1) return only_prefix;
  return "";
}

}  // namespace tally::cli
