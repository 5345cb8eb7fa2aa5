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

void SpecialTokenSplitter::split_prompt(std::string_view text, const std::vector<uint8_t>& from_content,
                                        std::string_view markup, std::vector<TextFragment>& out) const {
  auto content_bytes = [&](size_t b, size_t n) {
    size_t k = 0;
    for (size_t j = b; j < b + n; ++j) k += from_content[j] != 0;
    return k;
  };
  auto is_markup = [&](const std::string& t) {
    if (t.find_first_not_of(" \t\n\r") == std::string::npos) return false;  // whitespace tokens are text
    return markup.find(t) != std::string_view::npos;
  };
  size_t plain_start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const Candidate* hit = nullptr;
    bool as_text = false;
    for (const Candidate& c : by_first_byte_[static_cast<uint8_t>(text[i])]) {
      if (text.substr(i, c.text.size()) != c.text) continue;
      const size_t inside = content_bytes(i, c.text.size());
      if (inside == 0) {
        hit = &c;  // the template's own: a token
        break;
      }
      if (!c.control && !is_markup(c.text)) {
        hit = &c;  // an ordinary added word, wherever it is
        break;
      }
      if (inside == c.text.size()) {
        hit = &c;  // markup spelled by the conversation: text of its own
        as_text = true;
        break;
      }
      // Straddles the template and the conversation: no match.
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    if (i > plain_start) out.push_back({text.substr(plain_start, i - plain_start), -1});
    out.push_back({text.substr(i, hit->text.size()), as_text ? -1 : hit->id});
    i += hit->text.size();
    plain_start = i;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1});
}

}  // namespace tally
