#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace tally {

SpecialTokenSplitter::SpecialTokenSplitter(const Vocab& vocab) {
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType t = vocab.type(id);
    if (t != TokenType::Control && t != TokenType::UserDefined) continue;
    const std::string& s = vocab.tokens[static_cast<size_t>(id)];
    if (s.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(s[0])].push_back({s, id, t == TokenType::Control});
  }
  for (auto& list : by_first_byte_)
    std::stable_sort(list.begin(), list.end(), [](const Candidate& a, const Candidate& b) {
      return a.text.size() > b.text.size();
    });
}

void SpecialTokenSplitter::split(std::string_view text, bool parse_control,
                                 std::vector<TextFragment>& out) const {
  size_t plain_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const Candidate* hit = nullptr;
    for (const Candidate& c : by_first_byte_[static_cast<uint8_t>(text[i])]) {
      if (c.control && !parse_control) continue;
      if (text.substr(i, c.text.size()) == c.text) {
        hit = &c;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (i > plain_start) out.push_back({text.substr(plain_start, i - plain_start), -1});
    out.push_back({hit->text, hit->id});
    i += hit->text.size();
    plain_start = i;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1});
}

}  // namespace tally
