// tally perplexity: exp(mean negative log-likelihood) of a text, in
// non-overlapping windows of CTX tokens, each evaluated from an empty cache;
// inside a window every position predicts the next (CTX - 1 predictions).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "bench/progress.h"
#include "commands.h"
#include "core/error.h"
#include "encode_input.h"
#include "io/text_file.h"
#include "model_options.h"
#include "option_checks.h"
#include "output.h"
#include "runtime/perplexity.h"

namespace tally::cli {

namespace {

struct PerplexityOptions {
  ModelOptions m;
  std::string file;
  bool json = false;
};

PerplexityResult measure(const PerplexityOptions& o) {
  const std::string text = read_text_file(o.file, "text file", kMaxTextBytes);
  LoadedModel lm = load_model(o.m);
  const auto ids = encode_input(*lm.tokenizer, text, true, false, "the text file");
  const int64_t windows = static_cast<int64_t>(ids.size()) / o.m.ctx;
  if (windows == 0)
    fail("{} has {} tokens, fewer than one window of -c {}: give more text or a smaller -c", o.file, ids.size(),
         o.m.ctx);
  const std::unique_ptr<Session> session = open_session(*lm.model, session_options(o.m, *lm.model, true));
  // On a terminal: one line redrawn with the time left; otherwise a line per window (logs).
  Progress progress("tally perplexity");
  return perplexity(*session, ids, o.m.ctx, [&](const PerplexityResult& p) {
    if (o.json) return;
    const auto done = static_cast<int64_t>(p.window_nll.size());
    const std::string what = fmt::format("window {} of {}, perplexity so far {:.4f}", done, windows, p.ppl);
    if (progress.enabled())
      progress.update(what, static_cast<double>(done), static_cast<double>(windows));
    else
      fmt::print(stderr, "[{}]\n", what);
  });
}

void print_json(const PerplexityOptions& o, const PerplexityResult& r) {
  cli::print_json({{"tokens", r.predictions}, {"ppl", r.ppl}, {"nll", r.nll}, {"ctx", o.m.ctx}, {"windows", r.windows},
              {"window_nll", r.window_nll}});
}

void print_text(const PerplexityOptions& o, const PerplexityResult& r) {
  fmt::print("perplexity {:.4f} (mean nll {:.5f}) over {} predictions in {} windows of {}\n", r.ppl, r.nll,
             r.predictions, r.windows, o.m.ctx);
}

}  // namespace

void add_perplexity(CLI::App& app) {
  auto o = std::make_shared<PerplexityOptions>();
  o->m.ctx = 512;
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a text file in windows of -c tokens");
  add_model_options(cmd, o->m, kRunning, "Window size in tokens, e.g. 2k");
  cmd->get_option("--ctx")->capture_default_str()->transform(token_count_in(2, kMaxContextTokens));
  cmd->add_option("-f,--file", o->file, "Text file")->required()->check(nonempty_path());
  cmd->add_flag("--json", o->json, "Print {\"tokens\", \"ppl\", \"nll\", \"ctx\", \"windows\", \"window_nll\"}");
  cmd->callback([o] {
    o->m.validate();
    const PerplexityResult r = measure(*o);
    o->json ? print_json(*o, r) : print_text(*o, r);
  });
}

}  // namespace tally::cli
