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
  if (o.max_tokens < 0) fail("token limit must be >= 0, got {}", o.max_tokens);
  if (s.length() + static_cast<int64_t>(prompt.size()) > s.n_ctx())
    fail("the prompt has {} tokens, more than the {} left in the context of {} (raise -c)", prompt.size(),
         s.n_ctx() - s.length(), s.n_ctx());
  GenerateResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  Sampler sampler(o.sampling);
  // The no-cache baseline still needs the full sequence to recompute from.
  std::vector<int32_t> history(s.tokens());

  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits = s.append(prompt);
  history.insert(history.end(), prompt.begin(), prompt.end());
  r.prefill_ms = ms_since(t0);

  t0 = std::chrono::steady_clock::now();
  while (static_cast<int64_t>(r.tokens.size()) < o.max_tokens) {
    const int32_t next = sampler.sample(logits, history);
    if (o.is_stop && o.is_stop(next)) {
      r.stop = GenerateResult::Stop::EndToken;
      break;
    }
    r.tokens.push_back(next);
    history.push_back(next);
    if (on_token) on_token(next);
    if (static_cast<int64_t>(r.tokens.size()) >= o.max_tokens) break;
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
