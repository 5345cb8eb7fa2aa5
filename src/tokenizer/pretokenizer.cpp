#include "tokenizer/pretokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/printable.h"

namespace tally {
namespace {

// The patterns come from the reference tokenizers (GPT-2's encoder.py,
// Qwen2's and Llama 3's tokenizer.json).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kDigit = R"(\p{N})";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct PreSpec {
  const char* name;
  std::vector<const char*> patterns;
  bool ignore_merges;
};

const std::vector<PreSpec>& specs() {
  static const std::vector<PreSpec> s = {
      {"default", {kGpt2}, false},   {"gpt-2", {kGpt2}, false},
      {"smollm", {kDigit, kGpt2}, false}, {"starcoder", {kDigit, kGpt2}, false},
      {"refact", {kDigit, kGpt2}, false}, {"qwen2", {kQwen2}, false},
      {"llama-bpe", {kLlama3}, true},
  };
  return s;
}

}  // namespace

std::vector<std::string> Pretokenizer::known_names() {
  std::vector<std::string> names;
  for (const auto& s : specs()) names.emplace_back(s.name);
  return names;
}

Pretokenizer::Pretokenizer(const std::string& pre) {
  for (const auto& s : specs()) {
    if (pre != s.name) continue;
    for (const char* p : s.patterns) regexes_.emplace_back(p);
    ignore_merges_ = s.ignore_merges;
    return;
  }
  fail("unsupported pre-tokenizer tokenizer.ggml.pre = '{}' (supported: {})", excerpt(pre),
       fmt::join(known_names(), ", "));
}

void Pretokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> cur{text}, next;
  for (const Regex& re : regexes_) {
    next.clear();
    for (std::string_view piece : cur) {
      size_t last = 0;
      re.for_each_match(piece, [&](size_t b, size_t e) {
        if (b > last) next.push_back(piece.substr(last, b - last));  // the gap
        next.push_back(piece.substr(b, e - b));
        last = e;
      });
      if (last < piece.size()) next.push_back(piece.substr(last));
    }
    cur.swap(next);
  }
  out.insert(out.end(), cur.begin(), cur.end());
}

}  // namespace tally
