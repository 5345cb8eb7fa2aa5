// tally perplexity: exp(mean negative log-likelihood) of a text, in
// non-overlapping windows of CTX tokens, each evaluated from an empty cache;
// inside a window every position predicts the next (CTX - 1 predictions).
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "encode_input.h"
#include "option_checks.h"
#include "output.h"
#include "core/error.h"
#include "io/text_file.h"
#include "model_options.h"
#include "runtime/perplexity.h"

namespace tally::cli {

void add_perplexity(CLI::App& app) {
  struct Opts {
    ModelOptions m;
    std::string file;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  o->m.ctx = 512;
  auto* cmd = app.add_subcommand("perplexity", "Perplexity of a text file in windows of -c tokens");
  add_model_options(cmd, o->m);
  cmd->add_option("-f,--file", o->file, "Text file")->required()->check(nonempty_path());
  cmd->add_flag("--json", o->json, "Print {\"tokens\", \"ppl\", \"nll\"}");
  cmd->callback([o] {
    const std::string text = read_text_file(o->file, "text file", kMaxTextBytes);
    LoadedModel lm = load_model(o->m);
    const auto ids = encode_input(*lm.tokenizer, text, true, false, "the text file");
    Session session(*lm.model, session_options(o->m, *lm.model, true));
    const PerplexityResult r = perplexity(session, ids, o->m.ctx, [&](const PerplexityResult& p) {
      if (!o->json) fmt::print(stderr, "[window {}] ppl so far {:.4f}\n", p.window_nll.size(), p.ppl);
    });
    if (o->json)
      print_json({{"tokens", r.predictions}, {"ppl", r.ppl}, {"nll", r.nll}, {"ctx", o->m.ctx},
                  {"windows", r.windows}, {"window_nll", r.window_nll}});
    else
      fmt::print("perplexity {:.4f} (mean nll {:.5f}) over {} predictions in {} windows of {}\n", r.ppl, r.nll,
                 r.predictions, r.windows, o->m.ctx);
  });
}

}  // namespace tally::cli
