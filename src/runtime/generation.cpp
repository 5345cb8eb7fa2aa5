#include "runtime/generation.h"

#include <limits>

#include "core/error.h"

namespace tally {

void GenerationParams::validate() const {
  sampling.validate();
  if (max_tokens < -1) fail("the token limit must be >= 0 (or -1: none), got {}", max_tokens);
  for (const std::string& s : stop)
    if (s.empty()) fail("a stop string must not be empty");
  if (top_logprobs < -1 || top_logprobs > 20) fail("top logprobs must be between 0 and 20, got {}", top_logprobs);
}

const char* finish_reason(Finish f) {
  switch (f) {
    case Finish::EndToken:
    case Finish::StopString: return "stop";
    case Finish::MaxTokens:
    case Finish::ContextFull: return "length";
    case Finish::Cancelled: return "cancelled";
    case Finish::Failed: return "error";
    case Finish::None: break;
  }
  return "";
}

grammar::Vocabulary grammar_vocabulary(const Tokenizer& tok, int32_t n_logits) {
  const int32_t n = tok.n_vocab();
  if (n_logits < n) fail("the logits have {} rows, fewer than the {} tokens of the vocabulary", n_logits, n);
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<int32_t> ends;
  std::vector<bool> unused(static_cast<size_t>(n));
  for (int32_t id : tok.unused_ids())
    if (id >= 0 && id < n) unused[static_cast<size_t>(id)] = true;
  for (int32_t id = 0; id < n; ++id) {
    if (tok.is_end_of_generation(id))
      ends.push_back(id);
    else if (!tok.is_control(id) && !unused[static_cast<size_t>(id)])
      bytes[static_cast<size_t>(id)] = tok.token_bytes(id, /*render_special=*/false);
  }
  return grammar::Vocabulary(std::move(bytes), n_logits, std::move(ends));
}

namespace {

// The sampling parameters with the vocabulary's unused tokens banned: no
// text stands for them (padding rows of the embedding).
SamplerParams without_unused(SamplerParams s, const Tokenizer* tok) {
  if (tok != nullptr)
    for (int32_t id : tok->unused_ids()) s.logit_bias.emplace_back(id, -std::numeric_limits<float>::infinity());
  return s;
}

}  // namespace

Generation::Generation(const GenerationParams& p, const Tokenizer* tok)
    : p_(p), sampler_(without_unused(p.sampling, tok)) {
  p_.validate();
  if (tok != nullptr) decoder_.emplace(*tok);
  if (!p_.stop.empty() && tok == nullptr) fail("stop strings need a tokenizer to decode the text");
  if (p_.constraint) grammar_.emplace(*p_.constraint);
}

std::span<const float> Generation::constrained(std::span<const float> logits) {
  if (!grammar_) return logits;
  masked_.assign(logits.begin(), logits.end());
  if (grammar_->mask(masked_) == 0) {
    // Nothing may follow: the grammar is complete and the vocabulary has no
    // end token for it (otherwise the end token would be allowed).
    finish_ = grammar_->can_end() ? Finish::EndToken : Finish::Failed;
    if (finish_ == Finish::Failed) fail("the grammar allows no token here and cannot end");
    return {};
  }
  return masked_;
}

bool Generation::begin_step(std::span<const float>& logits) {
  if (finished()) fail("the generation has finished: no more steps");
  if (p_.max_tokens >= 0 && generated_ >= p_.max_tokens) {
    finish_ = Finish::MaxTokens;
    return false;
  }
  took_guess_ = false;
  logits = constrained(logits);
  return !finished();
}

std::optional<Emission> Generation::step(std::span<const float> logits, std::span<const int32_t> history,
                                         int64_t room) {
  if (!begin_step(logits)) return std::nullopt;
  Emission e;
  e.token = sampler_.sample(logits, history, static_cast<size_t>(generated_));
  return finish_step(std::move(e), logits, room);
}

std::optional<Emission> Generation::step(std::span<const float> logits, std::span<const int32_t> history,
                                         int64_t room, const Guess& guess) {
  if (!begin_step(logits)) return std::nullopt;
  Emission e;
  e.token = choose(sampler_.distribution(logits, history, static_cast<size_t>(generated_)), guess);
  took_guess_ = e.token == guess.token;
  return finish_step(std::move(e), logits, room);
}

int32_t Generation::choose(std::span<const Sampler::Candidate> dist, const Guess& guess) {
  if (sampler_.greedy()) return dist.front().id;
  double total = 0, p = 0;
  for (const Sampler::Candidate& c : dist) {
    total += c.p;
    if (c.id == guess.token) p = c.p;
  }
  p /= total;
  auto q_of = [&](int32_t id) -> double {
    if (guess.q.empty()) return id == guess.token ? 1.0 : 0.0;
    for (const auto& [qid, qp] : guess.q)
      if (qid == id) return qp;
    return 0.0;
  };
  const double q = q_of(guess.token);
  if (q > 0 && sampler_.uniform() * q < p) return guess.token;  // kept with probability min(1, p / q)
  // Rejected: a draw from max(0, p - q), normalized (draw() normalizes).
  residual_.clear();
  for (const Sampler::Candidate& c : dist) {
    const double r = c.p / total - q_of(c.id);
    if (r > 0) residual_.push_back({c.id, c.logit, static_cast<float>(r)});
  }
  if (residual_.empty()) return guess.token;  // p == q everywhere: the guess was a draw from p itself
  return sampler_.draw(residual_);
}

std::optional<Emission> Generation::finish_step(Emission e, std::span<const float> logits, int64_t room) {
  if (p_.top_logprobs >= 0) {
    log_softmax(logits, lp_);
    e.logprob = lp_[static_cast<size_t>(e.token)];
    e.top = top_entries(lp_, static_cast<size_t>(p_.top_logprobs));
  }
  if (grammar_ && !grammar_->accept(e.token)) {
    // The mask allowed only tokens the grammar accepts: a refusal here is a broken invariant, never output.
    finish_ = Finish::Failed;
    fail("the grammar refused token {}, which its mask allowed", e.token);
  }
  if ((p_.is_stop && p_.is_stop(e.token)) || (grammar_ && grammar_->finished())) {
    finish_ = Finish::EndToken;
    return std::nullopt;
  }
  ++generated_;
  if (decoder_) {
    // Hold back what could be the start of a stop string; end at one.
    held_ += decoder_->push(e.token);
    size_t cut = std::string::npos;
    for (const std::string& s : p_.stop) cut = std::min(cut, held_.find(s));
    if (cut != std::string::npos) {
      e.text = held_.substr(0, cut);
      held_.clear();
      decoder_->flush();
      finish_ = Finish::StopString;
      return e;
    }
    size_t keep = 0;
    for (const std::string& s : p_.stop)
      for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k)
        if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
    e.text = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
  }
  if (p_.max_tokens >= 0 && generated_ >= p_.max_tokens)
    finish_ = Finish::MaxTokens;
  else if (room <= 0)
    finish_ = Finish::ContextFull;
  else
    next_ = e.token;
  return e;
}

void Generation::end(Finish why) {
  if (!finished()) finish_ = why;
}

std::optional<Emission> Generation::tail() {
  if (!finished() || !decoder_) return std::nullopt;
  Emission e;
  e.text = held_ + decoder_->flush();
  held_.clear();
  if (e.text.empty()) return std::nullopt;
  return e;
}

}  // namespace tally
