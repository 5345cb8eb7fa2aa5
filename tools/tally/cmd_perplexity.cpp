// tally perplexity: exp(mean negative log-likelihood) of a text, in
// non-overlapping windows of CTX tokens, each evaluated from an empty cache;
// inside a window every position predicts the next (CTX - 1 predictions).
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "core/error.h"
#include "model_options.h"

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
  cmd->add_option("-f,--file", o->file, "Text file")->required();
  cmd->add_flag("--json", o->json, "Print {\"tokens\", \"ppl\", \"nll\"}");
  cmd->callback([o] {
    std::ifstream in(o->file, std::ios::binary);
    if (!in) fail("{}: cannot open text file", o->file);
    std::ostringstream ss;
    ss << in.rdbuf();
    LoadedModel lm = load_model(o->m);
    const auto ids = lm.tokenizer->encode(ss.str(), true, false);
    const int64_t ctx = o->m.ctx;
    if (ctx < 2) fail("-c must be at least 2 for perplexity, got {}", ctx);
    const int64_t windows = static_cast<int64_t>(ids.size()) / ctx;
    if (windows == 0) fail("{}: {} tokens are fewer than one window of {} (lower -c)", o->file, ids.size(), ctx);
    Session session(*lm.model, session_options(o->m, *lm.model, true));
    const int64_t V = lm.model->config().n_vocab;
    double nll = 0;
    int64_t scored = 0;
    for (int64_t w = 0; w < windows; ++w) {
      session.truncate(0);
      const auto window = std::span<const int32_t>(ids).subspan(w * ctx, ctx);
      session.append(window, [&](int64_t pos, const float* logits, int64_t rows) {
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t p = pos + r;
          if (p + 1 >= ctx) continue;
          const float* row = logits + r * V;
          float mx = row[0];
          for (int64_t i = 1; i < V; ++i) mx = std::max(mx, row[i]);
          double sum = 0;
          for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(row[i] - mx));
          nll += std::log(sum) + mx - row[window[p + 1]];
          ++scored;
        }
      });
      if (!o->json) fmt::print(stderr, "[window {}/{}] ppl so far {:.4f}\n", w + 1, windows, std::exp(nll / scored));
    }
    const double mean = nll / scored;
    if (o->json)
      fmt::print("{}\n", nlohmann::json{{"tokens", scored}, {"ppl", std::exp(mean)}, {"nll", mean}, {"ctx", ctx},
                                        {"windows", windows}}
                             .dump());
    else
      fmt::print("perplexity {:.4f} (mean nll {:.5f}) over {} predictions in {} windows of {}\n", std::exp(mean), mean,
                 scored, windows, ctx);
  });
}

}  // namespace tally::cli
