#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"

namespace tally {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? "unknown PCRE2 error " + std::to_string(code)
               : std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};

}  // namespace

void Regex::CodeDeleter::operator()(pcre2_real_code_8* c) const { pcre2_code_free(c); }

Regex::Regex(std::string pattern) : pattern_(std::move(pattern)) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off,
                                   nullptr);
  if (code == nullptr)
    fail("regex '{}': {} at offset {}", pattern_, pcre2_message(err), err_off);
  code_.reset(code);
  // JIT is an optimisation only: without it (unsupported platform) matching
  // falls back to the interpreter with identical results.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
}

void Regex::for_each_match(std::string_view subject,
                           const std::function<void(size_t, size_t)>& on_match) const {
  // One match block per thread, reused by every pattern: only the whole-match
  // offsets are read, so a single ovector pair suffices (rc 0 = "ovector too
  // small", which still reports the whole match).
  thread_local std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create(1, nullptr));
  if (!md) fail("regex '{}': out of memory creating match data", pattern_);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  while (pos < subject.size()) {
    const int rc = pcre2_match(code_.get(), s, subject.size(), pos, 0, md.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0)
      fail("regex '{}': matching at byte {} failed: {}", pattern_, pos, pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (e == b) {
      // Empty match (none of our patterns produce one): step past one byte
      // so the loop always advances.
      pos = b + 1;
      continue;
    }
    on_match(b, e);
    pos = e;
  }
}

}  // namespace tally
