#include "speculation_options.h"

#include <fmt/format.h>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/printable.h"
#include "option_checks.h"
#include "runtime/speculation.h"
#include "usage.h"

namespace tally::cli {

namespace {
// A step verifies the next token and the guesses as one prefill: past a few
// dozen guesses, a step costs more than the tokens it could save.
constexpr int64_t kMaxDraft = 64;
constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();  // a token id is an int32
}  // namespace

void add_speculation_options(CLI::App* cmd, SpeculationOptions& s) {
  cmd->add_option("--speculate", s.mode,
                  "Speculative decoding: 'lookup' guesses the continuation of the latest earlier occurrence of the "
                  "last tokens (prompt lookup), 'draft' lets the smaller model of --draft guess; the guesses are "
                  "verified in one step and the output is what it would be without (greedy: the same tokens; "
                  "sampling: the same distribution); 'off' (the default, or 'draft' when --draft is given)")
      ->check(CLI::IsMember({"lookup", "draft", "off"}));
  cmd->add_option("--draft", s.draft_model,
                  "The draft model for --speculate draft: a name or a path, with the target's vocabulary (e.g. "
                  "qwen2.5-coder:0.5b for qwen2.5-coder:1.5b); its cache has the target's context and cache type");
  cmd->add_option("--draft-max", s.draft_max,
                  "With --speculate: at most K guesses verified per step, fewer while guesses are not kept (default 8)")
      ->transform(integer_in(1, kMaxDraft));
  add_draft_vocab_option(cmd, s.draft_vocab);
}

void add_draft_vocab_option(CLI::App* cmd, int64_t& given) {
  cmd->add_option("--draft-vocab", given,
                  fmt::format("With --draft: the draft model guesses only among the first N token ids and the tokens "
                              "of the text so far, which makes its steps cheaper (its output matrix is a large part of "
                              "what a small model reads; byte-pair vocabularies number the frequent tokens first); 0: "
                              "the whole vocabulary (default {})",
                              kDefaultDraftVocab))
      ->transform(integer_in(0, kMaxTokenId));
}

int64_t draft_vocab(int64_t given, bool drafting) {
  if (given >= 0 && !drafting) usage_fail("--draft-vocab limits a draft model's guesses: give --draft too");
  return !drafting ? 0 : given >= 0 ? given : kDefaultDraftVocab;
}

void SpeculationOptions::validate() const {
  if (draft_max > 0 && !on()) usage_fail("--draft-max sets the guesses of --speculate lookup|draft: give --speculate too");
  if (mode == "draft" && draft_model.empty()) usage_fail("--speculate draft needs the draft model: give --draft NAME|PATH");
  if (!draft_model.empty() && !drafting())
    usage_fail("--draft {} is a draft model for --speculate draft, not --speculate {}", excerpt(draft_model), mode);
  cli::draft_vocab(draft_vocab, drafting());
}

void SpeculationOptions::apply(SessionOptions& s) const {
  if (on()) s.logit_rows = draft() + 1;
}

void SpeculationOptions::apply(GenerateOptions& g) const {
  g.draft_max = draft();
  g.draft_vocab = cli::draft_vocab(draft_vocab, drafting());
}

void SpeculationOptions::check_context(int64_t n_ctx) const {
  if (on() && draft() + 1 > n_ctx)
    usage_fail("--draft-max {}: a step verifies {} tokens, more than the context of {} (lower --draft-max or raise -c)",
               draft(), draft() + 1, n_ctx);
}

namespace {
// The target's flags for the draft model: its -m is `draft`; -ngl is noted
// once, for the target; the prefix cache's disk tier is the target's.
ModelOptions draft_options(const ModelOptions& m, const std::string& draft) {
  ModelOptions dm = m;
  dm.model = draft;
  dm.gpu_layers.clear();
  dm.cache_dir.clear();
  return dm;
}
}  // namespace

LoadedModel load_draft(const ModelOptions& m, const std::string& draft, const LoadedModel& target) {
  try {
    LoadedModel lm = load_model(draft_options(m, draft));
    check_draft_vocabulary(*target.tokenizer, target.model->config().n_vocab, *lm.tokenizer,
                           lm.model->config().n_vocab);
    return lm;
  } catch (const UsageError& e) {
    usage_fail("--draft {}: {}", excerpt(draft), e.what());
  } catch (const Error& e) {
    fail("--draft {}: {}", excerpt(draft), e.what());
  }
}

std::unique_ptr<DraftRun> open_draft(const SpeculationOptions& s, const ModelOptions& m, const LoadedModel& target,
                                     const Session& target_session) {
  if (!s.drafting()) return nullptr;
  auto out = std::make_unique<DraftRun>();
  const std::string name = excerpt(s.draft_model);
  out->lm = load_draft(m, s.draft_model, target);
  SessionOptions so = session_options(draft_options(m, s.draft_model), *out->lm.model, false);
  so.n_ctx = target_session.n_ctx();
  so.threads = target_session.engine().shared_threads();  // they step in turn
  if (so.kv_budget > 0) {
    const uint64_t taken = target_session.cache().storage().bytes();
    if (taken >= so.kv_budget)
      fail("--draft {}: the target's KV cache takes {} of --kv-budget {}, leaving nothing for the draft model's",
           name, format_bytes_short(taken), format_bytes_short(so.kv_budget));
    so.kv_budget -= taken;
  }
  try {
    out->session = std::make_unique<Session>(*out->lm.model, so);
  } catch (const Error& e) {
    fail("--draft {}: its KV cache for the context of {} tokens: {} (raise --kv-budget or lower -c)",
         name, so.n_ctx, e.what());
  }
  return out;
}

}  // namespace tally::cli
