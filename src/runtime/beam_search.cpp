#include "runtime/beam_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "sampler/sampler.h"

namespace tally {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

struct Beam {
  Engine::Id id;
  double sum = 0;  // sum of the generated tokens' log-probabilities
};

struct Candidate {
  double sum;
  int beam;
  int32_t token;
};

// Candidates by score, then (stable, as torch.topk over a flat beam-major
// array is for distinct values) by beam and token order.
bool better(const Candidate& a, const Candidate& b) {
  if (a.sum != b.sum) return a.sum > b.sum;
  if (a.beam != b.beam) return a.beam < b.beam;
  return a.token < b.token;
}

void run_to_ready(Engine& e, std::span<const Engine::Id> ids) {
  for (;;) {
    bool all = true;
    for (const auto& id : ids) all = all && e.ready(id);
    if (all) return;
    if (e.step().empty()) {
      for (const auto& id : ids)
        if (e.stopped(id)) fail("beam search: the KV pool cannot hold the beams (a larger pool can)");
    }
  }
}

}  // namespace

BeamResult beam_search(Engine& e, std::span<const int32_t> prompt, const BeamOptions& o) {
  if (o.width < 1) fail("the beam width must be at least 1, got {}", o.width);
  if (o.max_tokens < 1) fail("beam search needs at least 1 token to generate, got {}", o.max_tokens);
  // W beams and the W candidates forked from them live at once.
  e.check_fits(2 * static_cast<int64_t>(o.width), static_cast<int64_t>(prompt.size()), o.max_tokens, "beam search");
  BeamResult r;
  r.prompt_tokens = static_cast<int64_t>(prompt.size());
  const uint64_t copied_before = e.cache_stats().copied_bytes;

  auto t0 = std::chrono::steady_clock::now();
  const Engine::Admission a = e.admit(prompt);
  if (!a.id) fail("beam search: {}", a.refusal);
  std::vector<Beam> beams{{*a.id, 0}};
  run_to_ready(e, std::vector<Engine::Id>{*a.id});
  r.prefill_ms = ms_since(t0);
  r.peak_held_bytes = e.held_bytes();

  t0 = std::chrono::steady_clock::now();
  const size_t W = static_cast<size_t>(o.width);
  std::vector<BeamHypothesis> done;  // kept sorted best first, at most W
  auto worst_done = [&] { return done.size() < W ? -std::numeric_limits<double>::infinity() : done.back().score; };
  auto add_done = [&](BeamHypothesis h) {
    if (done.size() == W && h.score <= done.back().score) return;
    done.insert(std::upper_bound(done.begin(), done.end(), h,
                                 [](const BeamHypothesis& x, const BeamHypothesis& y) { return x.score > y.score; }),
                std::move(h));
    if (done.size() > W) done.pop_back();
  };
  auto generated = [&](const Beam& b) {
    const auto& t = e.tokens(b.id);
    return std::vector<int32_t>(t.begin() + r.prompt_tokens, t.end());
  };
  std::vector<double> lp;
  std::vector<Candidate> cand;
  for (int64_t len = 0;; ++len) {
    // Every (beam, token) candidate; the 2W best.
    cand.clear();
    for (size_t b = 0; b < beams.size(); ++b) {
      log_softmax(e.logits(beams[b].id), lp);
      for (size_t tok = 0; tok < lp.size(); ++tok)
        cand.push_back({beams[b].sum + lp[tok], static_cast<int>(b), static_cast<int32_t>(tok)});
    }
    const size_t keep = std::min(cand.size(), 2 * W);
    std::partial_sort(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(keep), cand.end(), better);
    cand.resize(keep);

    // Finished hypotheses from the W best ranks; the next beams from the rest, in order.
    std::vector<std::pair<int, int32_t>> next;  // (parent, token)
    std::vector<double> next_sum;
    for (size_t rank = 0; rank < cand.size() && next.size() < W; ++rank) {
      const Candidate& c = cand[rank];
      if (o.is_stop && o.is_stop(c.token)) {
        if (rank >= W) continue;
        BeamHypothesis h;
        h.tokens = generated(beams[c.beam]);
        h.tokens.push_back(c.token);  // the stop token counts in the length, as in Hugging Face's scorer
        h.sum_logprobs = c.sum;
        h.score = c.sum / std::pow(static_cast<double>(h.tokens.size()), o.length_penalty);
        add_done(std::move(h));
        continue;
      }
      next.emplace_back(c.beam, c.token);
      next_sum.push_back(c.sum);
    }
    const int64_t cur = len + 1;  // generated length once the next tokens are in
    const bool at_max = cur >= o.max_tokens;
    // Done when no candidate of this step (the best of them, stop tokens included) can beat the worst finished one.
    const bool no_better =
        done.size() == W && cand.front().sum / std::pow(static_cast<double>(cur), o.length_penalty) <= worst_done();
    if (next.empty() || no_better || at_max) {
      if (at_max)
        for (size_t i = 0; i < next.size(); ++i) {
          BeamHypothesis h;
          h.tokens = generated(beams[next[i].first]);
          h.tokens.push_back(next[i].second);
          h.sum_logprobs = next_sum[i];
          h.score = next_sum[i] / std::pow(static_cast<double>(h.tokens.size()), o.length_penalty);
          add_done(std::move(h));
        }
      break;
    }
    // New beams: forks of their parents (shared blocks, or full copies), each with its token.
    std::vector<Beam> fresh;
    for (size_t i = 0; i < next.size(); ++i) {
      const Engine::Id parent = beams[next[i].first].id;
      const Engine::Id child = o.copy_caches ? e.fork_copy(parent) : e.fork(parent);
      e.push(child, next[i].second);
      fresh.push_back({child, next_sum[i]});
    }
    r.peak_held_bytes = std::max(r.peak_held_bytes, e.held_bytes());  // parents and (copied) children at once
    for (const Beam& b : beams) e.release(b.id);
    beams = std::move(fresh);
    std::vector<Engine::Id> ids;
    for (const Beam& b : beams) ids.push_back(b.id);
    run_to_ready(e, ids);
    r.peak_held_bytes = std::max(r.peak_held_bytes, e.held_bytes());
    ++r.steps;
  }
  for (const Beam& b : beams) e.release(b.id);
  r.decode_ms = ms_since(t0);
  r.hypotheses = std::move(done);
  r.copied_bytes = e.cache_stats().copied_bytes - copied_before;
  return r;
}

}  // namespace tally
