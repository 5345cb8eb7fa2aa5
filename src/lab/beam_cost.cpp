#include "lab/beam_cost.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/error.h"
#include "kv/kv_shape.h"
#include "runtime/beam_search.h"
#include "sampler/sampler.h"
#include "runtime/engine.h"
#include "runtime/session.h"

namespace tally {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

EngineOptions engine_for(int width, int64_t length, int threads) {
  EngineOptions e;
  e.n_ctx = 2 * width * (length + 32) + 64;  // parents and their copies at once, for the copied run
  e.block_size = 16;
  e.step_tokens = 512;
  e.max_sequences = std::max(1, width);
  e.n_threads = threads;
  e.prefix_cache = false;
  return e;
}

// The same search with no cache at all, for its first `steps` steps: every
// beam's whole sequence is evaluated from scratch at every step.
BeamCostRow no_cache(const Model& m, std::span<const int32_t> prompt, int width, int64_t gen, int64_t steps,
                     int threads) {
  BeamCostRow row;
  row.mode = "none";
  SessionOptions so;
  so.n_ctx = static_cast<int64_t>(prompt.size()) + gen + 1;
  so.n_threads = threads;
  Session s(m, so);
  struct Beam {
    std::vector<int32_t> seq;
    double sum;
  };
  std::vector<Beam> beams{{std::vector<int32_t>(prompt.begin(), prompt.end()), 0}};
  std::vector<double> lp;
  const auto& c = m.config();
  const uint64_t per_token = kv_bytes_per_token({c.n_layer, c.n_kv_head, c.head_dim}, DType::F16);
  const auto t0 = std::chrono::steady_clock::now();
  double prefill_ms = 0;
  for (int64_t step = 0; step < std::min(steps, gen); ++step) {
    struct Cand {
      double sum;
      int beam;
      int32_t tok;
    };
    std::vector<Cand> cand;
    for (size_t b = 0; b < beams.size(); ++b) {
      s.truncate(0);
      const auto t1 = std::chrono::steady_clock::now();
      log_softmax(s.append(beams[b].seq), lp);
      if (step == 0) prefill_ms = ms_since(t1);
      // The transient cache of one recompute is all a cache-free search holds.
      row.peak_held_bytes = std::max<uint64_t>(row.peak_held_bytes, per_token * beams[b].seq.size());
      for (size_t t = 0; t < lp.size(); ++t) cand.push_back({beams[b].sum + lp[t], static_cast<int>(b), static_cast<int32_t>(t)});
    }
    const size_t keep = std::min<size_t>(cand.size(), static_cast<size_t>(width));
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(),
                      [](const Cand& a, const Cand& b) { return a.sum > b.sum; });
    std::vector<Beam> next;
    for (size_t i = 0; i < keep; ++i) {
      Beam nb = beams[cand[i].beam];
      nb.seq.push_back(cand[i].tok);
      nb.sum = cand[i].sum;
      next.push_back(std::move(nb));
    }
    beams = std::move(next);
    ++row.steps_timed;
  }
  const double decode_ms = ms_since(t0) - prefill_ms;
  // Step 0 evaluates the prompt once (the prefill, left out as in the cached rows); the
  // steps after it are the per-token cost. With one step there is only that one.
  row.ms_per_token = row.steps_timed > 1 ? decode_ms / static_cast<double>(row.steps_timed - 1) : prefill_ms;
  // Step k recomputes W sequences of prompt + k tokens: extrapolate with the
  // measured cost per recomputed position.
  const double positions_timed = [&] {
    double p = 0;
    for (int64_t k = 0; k < row.steps_timed; ++k)
      p += (k == 0 ? 1.0 : width) * static_cast<double>(prompt.size() + k);
    return p;
  }();
  const double ms_per_position = ms_since(t0) / positions_timed;
  double positions = 0;
  for (int64_t k = 0; k < gen; ++k) positions += (k == 0 ? 1.0 : width) * static_cast<double>(prompt.size() + k);
  row.total_ms = positions * ms_per_position;
  row.generated = gen;
  return row;
}

}  // namespace

std::vector<BeamCostRow> measure_beam_cost(const Model& model, std::span<const int32_t> source, const BeamCostOptions& o,
                                           const std::function<void(int64_t, int64_t)>& progress) {
  if (o.gen_tokens < 1) fail("--gen-tokens must be at least 1, got {}", o.gen_tokens);
  if (o.none_steps < 1) fail("--none-steps must be at least 1, got {}", o.none_steps);
  for (int w : o.widths)
    if (w < 1) fail("--widths values must be at least 1, got {}", w);
  for (int64_t p : o.prompts) {
    if (p < 1) fail("--prompt-tokens values must be at least 1, got {}", p);
    if (p > static_cast<int64_t>(source.size())) fail("a prompt of {} tokens needs that many source tokens", p);
    if (p + o.gen_tokens > model.config().n_ctx_train)
      fail("--prompt-tokens {} + --gen-tokens {} exceed the model's trained context of {}", p, o.gen_tokens,
           model.config().n_ctx_train);
  }
  std::vector<BeamCostRow> rows;
  const int64_t total = static_cast<int64_t>(o.widths.size() * o.prompts.size()) * 3;
  int64_t done = 0;
  for (int64_t p : o.prompts)
    for (int w : o.widths) {
      const auto prompt = source.first(static_cast<size_t>(p));
      std::vector<int32_t> best;
      for (bool copy : {false, true}) {
        if (progress) progress(done, total);
        Engine e(model, engine_for(w, p + o.gen_tokens, o.n_threads));
        BeamOptions b;
        b.width = w;
        b.max_tokens = o.gen_tokens;
        b.copy_caches = copy;
        const auto t0 = std::chrono::steady_clock::now();
        const BeamResult r = beam_search(e, prompt, b);
        BeamCostRow row;
        row.width = w;
        row.prompt_tokens = p;
        row.mode = copy ? "copied" : "shared";
        row.generated = r.hypotheses.empty() ? 0 : static_cast<int64_t>(r.hypotheses.front().tokens.size());
        row.steps_timed = r.steps;
        row.peak_held_bytes = r.peak_held_bytes;
        row.copied_bytes = r.copied_bytes;
        row.ms_per_token = r.steps > 0 ? r.decode_ms / static_cast<double>(r.steps) : 0;
        row.total_ms = ms_since(t0);
        if (!copy && !r.hypotheses.empty()) best = r.hypotheses.front().tokens;
        row.same_beams = copy ? (!r.hypotheses.empty() && r.hypotheses.front().tokens == best) : true;
        rows.push_back(row);
        ++done;
      }
      if (progress) progress(done, total);
      BeamCostRow none = no_cache(model, prompt, w, o.gen_tokens, o.none_steps, o.n_threads);
      none.width = w;
      none.prompt_tokens = p;
      none.same_beams = false;  // measured over a few steps only: not compared
      rows.push_back(none);
      ++done;
    }
  return rows;
}

}  // namespace tally
