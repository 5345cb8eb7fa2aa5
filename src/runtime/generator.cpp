#include "runtime/generator.h"

#include <chrono>

#include "core/error.h"

namespace tally {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GenerateResult generate(Session& s, std::span<const int32_t> prompt, const GenerateOptions& o,
                        const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) fail("the prompt is empty: nothing to generate from");
  if (o.max_tokens < -1) fail("token limit must be >= 0 (or -1: none), got {}", o.max_tokens);
  if (o.max_tokens == -1 && o.sinks < 0) fail("generating with no token limit needs a sliding window (--stream)");
  if (o.sinks >= 0 && !o.use_cache) fail("a sliding window slides the cache; it has no no-cache mode");
  if (o.sinks >= 0) s.check_window(o.sinks);
  const int64_t limit = o.max_tokens < 0 ? INT64_MAX : o.max_tokens;
  GenerateResult r;
  if (o.sinks >= 0 && s.length() + static_cast<int64_t>(prompt.size()) > s.n_ctx())
    r.slid += s.slide(static_cast<int64_t>(prompt.size()), o.sinks);
  if (s.length() + static_cast<int64_t>(prompt.size()) > s.n_ctx())
    fail("the prompt has {} tokens, more than the {} left in the context of {} (raise -c)", prompt.size(),
         s.n_ctx() - s.length(), s.n_ctx());
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  Sampler sampler(o.sampling);
  // The no-cache baseline still needs the full sequence to recompute from.
  std::vector<int32_t> history(s.tokens());

  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits = s.append(prompt);
  history.insert(history.end(), prompt.begin(), prompt.end());
  r.prefill_ms = ms_since(t0);

  t0 = std::chrono::steady_clock::now();
  while (static_cast<int64_t>(r.tokens.size()) < limit) {
    const int32_t next = sampler.sample(logits, history);
    if (o.is_stop && o.is_stop(next)) {
      r.stop = GenerateResult::Stop::EndToken;
      break;
    }
    r.tokens.push_back(next);
    history.push_back(next);
    if (o.sinks >= 0 && history.size() > 4096)  // a stream runs forever: keep what the penalties look at
      history.erase(history.begin(), history.end() - 1024);
    if (on_token) on_token(next);
    if (static_cast<int64_t>(r.tokens.size()) >= limit) break;
    if (o.sinks >= 0) r.slid += s.slide(1, o.sinks);
    if (s.length() + 1 > s.n_ctx()) {
      r.stop = GenerateResult::Stop::ContextFull;
      break;
    }
    if (o.use_cache) {
      logits = s.append(std::span<const int32_t>(&next, 1));  // decode: position = cache length
    } else {
      s.truncate(0);
      logits = s.append(history);
    }
    ++r.decode_steps;
  }
  r.decode_ms = ms_since(t0);
  return r;
}

}  // namespace tally
