#include "sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace tally {

void SamplerParams::validate() const {
  if (!(temperature >= 0) || !std::isfinite(temperature)) fail("the temperature must be >= 0, got {}", temperature);
  if (top_k < 0) fail("top-k must be >= 0, got {}", top_k);
  if (!(top_p > 0 && top_p <= 1)) fail("top-p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0 && min_p < 1)) fail("min-p must be in [0, 1), got {}", min_p);
  if (!(repeat_penalty > 0) || !std::isfinite(repeat_penalty))
    fail("the repeat penalty must be > 0, got {}", repeat_penalty);
  if (repeat_last_n < 0) fail("repeat window must be >= 0, got {}", repeat_last_n);
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) fail("the presence penalty must be in [-2, 2], got {}", presence_penalty);
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2))
    fail("the frequency penalty must be in [-2, 2], got {}", frequency_penalty);
  for (const auto& [id, bias] : logit_bias)
    if (id < 0 || std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
      fail("logit bias {} for token {}: the id must be >= 0 and the bias a number or -infinity", bias, id);
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  out.resize(logits.size());
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const double lse = mx + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = static_cast<double>(logits[i]) - lse;
}

std::vector<std::pair<int32_t, double>> top_entries(const std::vector<double>& lp, size_t k) {
  std::vector<int32_t> order(lp.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  k = std::min(k, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                    [&](int32_t a, int32_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
  std::vector<std::pair<int32_t, double>> out;
  for (size_t i = 0; i < k; ++i) out.emplace_back(order[i], lp[static_cast<size_t>(order[i])]);
  return out;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) { p.validate(); }

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history, size_t generated) {
  return draw(distribution(logits, history, generated));
}

std::span<const Sampler::Candidate> Sampler::distribution(std::span<const float> logits,
                                                          std::span<const int32_t> history, size_t generated) {
  if (logits.empty()) fail("sampler: empty logits");
  adjusted_.assign(logits.begin(), logits.end());
  for (size_t i = 0; i < adjusted_.size(); ++i)
    if (std::isnan(adjusted_[i]) || adjusted_[i] == std::numeric_limits<float>::infinity())
      fail("the model's logits are not finite ({} for token {} of {}): its weights or activations overflowed",
           adjusted_[i], i, adjusted_.size());
  for (const auto& [id, bias] : p_.logit_bias)
    if (static_cast<size_t>(id) < adjusted_.size()) adjusted_[static_cast<size_t>(id)] += bias;
  if ((p_.presence_penalty != 0 || p_.frequency_penalty != 0) && generated > 0) {
    std::unordered_map<int32_t, int> count;
    for (int32_t id : history.last(std::min(generated, history.size()))) ++count[id];
    for (const auto& [id, k] : count)
      if (id >= 0 && static_cast<size_t>(id) < adjusted_.size())
        adjusted_[id] -= p_.frequency_penalty * static_cast<float>(k) + p_.presence_penalty;
  }
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n > 0) {
    const size_t from = history.size() > static_cast<size_t>(p_.repeat_last_n) ? history.size() - p_.repeat_last_n : 0;
    std::unordered_set<int32_t> seen(history.begin() + from, history.end());
    for (int32_t id : seen) {
      if (id < 0 || static_cast<size_t>(id) >= adjusted_.size()) continue;
      float& l = adjusted_[id];
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }
  const int32_t best = argmax(adjusted_);
  if (adjusted_[static_cast<size_t>(best)] == -std::numeric_limits<float>::infinity())
    fail("no token can be sampled: every logit is -infinity (banned by a logit bias, or a model that overflowed)");
  if (p_.temperature <= 0) {
    cand_.assign(1, Candidate{best, adjusted_[static_cast<size_t>(best)], 1.0f});
    return cand_;
  }

  cand_.resize(adjusted_.size());
  for (size_t i = 0; i < adjusted_.size(); ++i) cand_[i] = {static_cast<int32_t>(i), adjusted_[i], 0};
  auto by_logit = [](const Candidate& a, const Candidate& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); };
  size_t n = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    n = p_.top_k;
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  const float mx = cand_[0].logit;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].p = std::exp((cand_[i].logit - mx) / p_.temperature);
    sum += cand_[i].p;
  }
  for (size_t i = 0; i < n; ++i) cand_[i].p = static_cast<float>(cand_[i].p / sum);
  if (p_.top_p < 1) {  // smallest prefix whose mass reaches top_p
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += cand_[i].p;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (p_.min_p > 0) {
    const float floor = p_.min_p * cand_[0].p;
    size_t keep = 1;
    while (keep < n && cand_[keep].p >= floor) ++keep;
    n = keep;
  }
  return std::span<const Candidate>(cand_).first(n);
}

int32_t Sampler::draw(std::span<const Candidate> dist) {
  if (dist.empty()) fail("sampler: nothing to draw from");
  if (p_.temperature <= 0) return dist.front().id;  // greedy takes nothing from the stream
  double total = 0;
  for (const Candidate& c : dist) total += c.p;
  double r = rng_.uniform() * total;
  for (const Candidate& c : dist) {
    r -= c.p;
    if (r < 0) return c.id;
  }
  return dist.back().id;
}

}  // namespace tally
