#include "lab/kv_quant_quality.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "core/error.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "sampler/sampler.h"

namespace tally {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kChunk = 256;  // rows of logits held per type at once

// KL(P || Q) from log-probabilities.
double kl(const std::vector<double>& lp, const std::vector<double>& lq) {
  double s = 0;
  for (size_t i = 0; i < lp.size(); ++i) s += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, s);
}

int64_t index_of(const std::vector<DType>& v, DType t) {
  const auto it = std::find(v.begin(), v.end(), t);
  if (it == v.end()) fail("the kv-quant comparison needs an {} cache among the types", dtype_name(t));
  return it - v.begin();
}

}  // namespace

KvQuantReport measure_kv_quant(const Model& model, const Tokenizer& tok, std::span<const int32_t> text,
                               const KvQuantOptions& o, const std::function<void(int64_t, int64_t)>& progress) {
  const int64_t V = model.config().n_vocab;
  const size_t nt = o.types.size();
  const int64_t i16 = index_of(o.types, DType::F16), i32 = index_of(o.types, DType::F32);
  KvQuantReport rep;
  int64_t total = 0, done = 0;
  for (int64_t c : o.contexts) {
    if (c < 2) fail("a context of {} holds no prediction", c);
    if (static_cast<int64_t>(text.size()) < c) fail("the text has {} tokens, fewer than the context {}", text.size(), c);
    total += std::max<int64_t>(1, std::min<int64_t>(o.tokens, static_cast<int64_t>(text.size())) / c) * c *
             static_cast<int64_t>(nt);
  }
  for (int64_t c : o.contexts) {
    const int64_t windows = std::max<int64_t>(1, std::min<int64_t>(o.tokens, static_cast<int64_t>(text.size())) / c);
    std::vector<KvQuantRow> rows(nt);
    std::vector<double> kl16_sum(nt, 0), kl32_sum(nt, 0), nll_sum(nt, 0);
    std::vector<int64_t> top1(nt, 0);
    int64_t preds = 0;
    for (int64_t w = 0; w < windows; ++w) {
      const auto win = text.subspan(static_cast<size_t>(w * c), static_cast<size_t>(c));
      std::vector<std::unique_ptr<Session>> sessions;
      for (DType t : o.types) {
        SessionOptions so;
        so.n_ctx = c;
        so.n_batch = kChunk;
        so.n_threads = o.n_threads;
        so.cache_type = t;
        so.all_logits = true;
        sessions.push_back(std::make_unique<Session>(model, so));
      }
      std::vector<std::vector<float>> logits(nt, std::vector<float>(static_cast<size_t>(kChunk * V)));
      std::vector<std::vector<double>> lp(nt);
      for (int64_t p0 = 0; p0 < c; p0 += kChunk) {
        const int64_t n = std::min(kChunk, c - p0);
        for (size_t k = 0; k < nt; ++k) {
          const auto t0 = Clock::now();
          sessions[k]->append(win.subspan(static_cast<size_t>(p0), static_cast<size_t>(n)),
                              [&](int64_t pos, const float* l, int64_t r) {
                                std::copy_n(l, r * V, logits[k].data() + (pos - p0) * V);
                              });
          rows[k].seconds += std::chrono::duration<double>(Clock::now() - t0).count();
          if (progress) progress(done += n, total);
        }
        for (int64_t r = 0; r < n && p0 + r + 1 < c; ++r) {
          const int32_t next = win[static_cast<size_t>(p0 + r + 1)];
          for (size_t k = 0; k < nt; ++k)
            log_softmax(std::span<const float>(logits[k].data() + r * V, static_cast<size_t>(V)), lp[k]);
          const auto argmax = [&](size_t k) { return std::max_element(lp[k].begin(), lp[k].end()) - lp[k].begin(); };
          const auto a16 = argmax(static_cast<size_t>(i16));
          for (size_t k = 0; k < nt; ++k) {
            nll_sum[k] -= lp[k][static_cast<size_t>(next)];
            const double d16 = kl(lp[static_cast<size_t>(i16)], lp[k]);
            kl16_sum[k] += d16;
            rows[k].max_kl_vs_f16 = std::max(rows[k].max_kl_vs_f16, d16);
            kl32_sum[k] += kl(lp[static_cast<size_t>(i32)], lp[k]);
            top1[k] += argmax(k) == a16;
          }
          ++preds;
        }
      }
    }
    for (size_t k = 0; k < nt; ++k) {
      KvQuantRow& r = rows[k];
      r.context = c;
      r.type = o.types[k];
      r.windows = windows;
      r.predictions = preds;
      r.ppl = std::exp(nll_sum[k] / static_cast<double>(preds));
      r.kl_vs_f16 = kl16_sum[k] / static_cast<double>(preds);
      r.kl_vs_f32 = kl32_sum[k] / static_cast<double>(preds);
      r.top1_vs_f16 = static_cast<double>(top1[k]) / static_cast<double>(preds);
      rep.rows.push_back(r);
    }
  }
  for (const std::string& prompt : o.prompts) {
    if (o.greedy_tokens == 0) break;  // --greedy-tokens 0: no agreement runs, no empty table
    const auto ids = tok.encode(prompt, true, false);
    std::vector<std::vector<int32_t>> outs(nt);
    for (size_t k = 0; k < nt; ++k) {
      SessionOptions so;
      so.n_ctx = static_cast<int64_t>(ids.size()) + o.greedy_tokens + 1;
      so.n_threads = o.n_threads;
      so.cache_type = o.types[k];
      Session s(model, so);
      GenerateOptions g;
      g.max_tokens = o.greedy_tokens;
      g.sampling.temperature = 0;
      outs[k] = generate(s, ids, g).tokens;
    }
    for (size_t k = 0; k < nt; ++k) {
      KvGreedyRow r{prompt, o.types[k], static_cast<int64_t>(outs[k].size()), 0};
      const auto& ref = outs[static_cast<size_t>(i16)];
      while (r.agree_prefix < r.generated && r.agree_prefix < static_cast<int64_t>(ref.size()) &&
             outs[k][static_cast<size_t>(r.agree_prefix)] == ref[static_cast<size_t>(r.agree_prefix)])
        ++r.agree_prefix;
      rep.greedy.push_back(r);
    }
  }
  return rep;
}

}  // namespace tally
