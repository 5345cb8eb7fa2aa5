#include "suggest.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tally::cli {
namespace {

// Optimal string alignment: insertions, deletions, substitutions and
// transpositions of neighbours each cost 1 (a typo's usual shapes).
size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.size() > 64) return "";  // no name is that long; and the table grows with the word
  std::string best;
  size_t best_d = SIZE_MAX;
  std::string only_prefix;
  int prefixes = 0;
  for (const std::string& c : candidates) {
    const size_t d = distance(word, c);
    if (d < best_d) best_d = d, best = c;
    if (c.size() > word.size() && c.compare(0, word.size(), word) == 0) ++prefixes, only_prefix = c;
  }
  // Without its dashes (or a chat command's slash) the word is what was typed:
  // "-x" against "-c" is not a typo worth naming.
  size_t letters = word.size();
  while (letters > 0 && (word[word.size() - letters] == '-' || word[word.size() - letters] == '/')) --letters;
  const size_t allowed = std::max<size_t>(1, letters / 3);
  if (letters < 2) return "";
  if (best_d > 0 && best_d <= allowed) return best;
  if (prefixes == 1) return only_prefix;
  return "";
}

}  // namespace tally::cli
