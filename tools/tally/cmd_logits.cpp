// tally logits: top-K (id, logit) per position, for comparisons with other engines.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "commands.h"
#include "encode_input.h"
#include "output.h"
#include "core/error.h"
#include "model_options.h"

namespace tally::cli {

void add_logits(CLI::App& app) {
  struct Opts {
    ModelOptions m;
    std::string prompt;
    int top = 10;
    bool all = false, json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("logits", "Print the top-K logits of the last (or every) prompt position");
  add_model_options(cmd, o->m);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (special-token text is parsed)")->required();
  cmd->add_option("--top", o->top, "How many (id, logit) pairs per position")->capture_default_str();
  cmd->add_flag("--all-positions", o->all, "Every prompt position, not only the last");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    if (o->top < 1) fail("--top must be at least 1, got {}", o->top);
    LoadedModel lm = load_model(o->m);
    const auto ids = encode_input(*lm.tokenizer, o->prompt, true, true, "the prompt");
    if (ids.empty()) fail("the prompt is empty");
    Session session(*lm.model, session_options(o->m, *lm.model, true));
    const int64_t V = lm.model->config().n_vocab;
    const int k = static_cast<int>(std::min<int64_t>(o->top, V));
    nlohmann::json positions = nlohmann::json::array();
    std::vector<int32_t> order(V);
    auto report = [&](int64_t pos, const float* row) {
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      nlohmann::json top = nlohmann::json::array();
      for (int i = 0; i < k; ++i) top.push_back({order[i], row[order[i]]});
      if (o->json) {
        positions.push_back({{"pos", pos}, {"token", ids[pos]}, {"top", top}});
      } else {
        fmt::print("pos {:>4} token {:>6}:", pos, ids[pos]);
        for (int i = 0; i < k; ++i) fmt::print(" {}:{:.4f}", order[i], row[order[i]]);
        fmt::print("\n");
      }
    };
    session.append(ids, [&](int64_t pos, const float* logits, int64_t rows) {
      for (int64_t r = 0; r < rows; ++r)
        if (o->all || pos + r == static_cast<int64_t>(ids.size()) - 1) report(pos + r, logits + r * V);
    });
    if (o->json) print_json({{"tokens", ids}, {"positions", positions}});
  });
}

}  // namespace tally::cli
