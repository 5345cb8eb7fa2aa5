#include "runtime/generator.h"

#include <chrono>
#include <limits>

#include "core/error.h"

namespace tally {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GenerateResult generate(Session& s, std::span<const int32_t> prompt, const GenerateOptions& o,
                        const std::function<void(const Emission&)>& on_emit, const Tokenizer* tok) {
  if (prompt.empty()) fail("the prompt is empty: nothing to generate from");
  if (o.max_tokens < -1) fail("token limit must be >= 0 (or -1: none), got {}", o.max_tokens);
  if (o.max_tokens == -1 && o.sinks < 0) fail("generating with no token limit needs a sliding window (sink tokens)");
  if (o.sinks >= 0 && !o.use_cache) fail("a sliding window slides the cache; it has no no-cache mode");
  if (o.sinks >= 0) s.check_window(o.sinks);
  GenerateResult r;
  if (o.sinks >= 0 && s.length() + static_cast<int64_t>(prompt.size()) > s.n_ctx())
    r.slid += s.slide(static_cast<int64_t>(prompt.size()), o.sinks);
  if (s.length() + static_cast<int64_t>(prompt.size()) > s.n_ctx())
    fail("the prompt has {} tokens, more than the {} left in the context of {}", prompt.size(),
         s.n_ctx() - s.length(), s.n_ctx());
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  Generation gen(o, tok);
  // The no-cache baseline still needs the full sequence to recompute from.
  std::vector<int32_t> history(s.tokens());
  auto emit = [&](const Emission& e) {
    r.text += e.text;
    if (on_emit) on_emit(e);
  };

  auto t0 = std::chrono::steady_clock::now();
  std::span<const float> logits = s.append(prompt);
  history.insert(history.end(), prompt.begin(), prompt.end());
  r.prefill_ms = ms_since(t0);

  t0 = std::chrono::steady_clock::now();
  for (;;) {
    // A sliding window always has room: it drops old positions instead.
    const int64_t room = o.sinks >= 0 ? std::numeric_limits<int64_t>::max() : s.n_ctx() - s.length();
    const std::optional<Emission> e = gen.step(logits, history, room);
    if (e) {
      r.tokens.push_back(e->token);
      history.push_back(e->token);
      if (o.sinks >= 0 && history.size() > 4096)  // a stream runs forever: keep what the penalties look at
        history.erase(history.begin(), history.end() - 1024);
      emit(*e);
    }
    if (!gen.finished() && o.cancel != nullptr && o.cancel->load()) gen.end(Finish::Cancelled);
    if (gen.finished()) break;
    const int32_t next = gen.next();
    if (o.sinks >= 0) r.slid += s.slide(1, o.sinks);
    if (o.use_cache) {
      logits = s.append(std::span<const int32_t>(&next, 1));  // decode: position = cache length
    } else {
      s.truncate(0);
      logits = s.append(history);
    }
    ++r.decode_steps;
  }
  if (const std::optional<Emission> t = gen.tail()) emit(*t);
  r.stop = gen.finish();
  r.decode_ms = ms_since(t0);
  return r;
}

}  // namespace tally
