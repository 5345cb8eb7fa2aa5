#pragma once
// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available).
// Immutable after construction and safe to share between threads: each
// search allocates its own match data.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

struct pcre2_real_code_8;

namespace tally {

class Regex {
 public:
  // Throws tally::Error with PCRE2's message and the offset in the pattern.
  explicit Regex(std::string pattern);

  const std::string& pattern() const { return pattern_; }

  // Calls on_match(begin, end) for every non-overlapping non-empty match in
  // `subject`, left to right. Ill-formed UTF-8 in the subject never matches
  // (PCRE2_MATCH_INVALID_UTF), so it is left to the gaps between matches.
  void for_each_match(std::string_view subject,
                      const std::function<void(size_t, size_t)>& on_match) const;

 private:
  struct CodeDeleter {
    void operator()(pcre2_real_code_8* c) const;
  };
  std::string pattern_;
  std::unique_ptr<pcre2_real_code_8, CodeDeleter> code_;
};

}  // namespace tally
