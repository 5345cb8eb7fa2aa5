// tally logits: top-K (id, logit) per position, for comparisons with other engines.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "commands.h"
#include "core/error.h"
#include "encode_input.h"
#include "model_options.h"
#include "option_checks.h"
#include "output.h"

namespace tally::cli {

namespace {

struct LogitsOptions {
  ModelOptions m;
  std::string prompt;
  int64_t top = 10;
  bool all = false, json = false;
};

struct PositionTop {
  int64_t pos = 0;
  int32_t token = 0;
  std::vector<std::pair<int32_t, float>> top;  // largest first; ties: lower id first
};

struct LogitsResult {
  std::vector<int32_t> tokens;
  std::vector<PositionTop> positions;
};

LogitsResult top_logits(const LogitsOptions& o) {
  LoadedModel lm = load_model(o.m);
  LogitsResult r;
  r.tokens = encode_input(*lm.tokenizer, o.prompt, true, true, "the prompt");
  if (r.tokens.empty()) fail("the prompt is empty");
  const std::unique_ptr<Session> session = open_session(*lm.model, session_options(o.m, *lm.model, true));
  const int64_t V = lm.model->config().n_vocab;
  const int64_t k = std::min<int64_t>(o.top, V);
  std::vector<int32_t> order(static_cast<size_t>(V));
  const int64_t last = static_cast<int64_t>(r.tokens.size()) - 1;
  session->append(r.tokens, [&](int64_t pos, const float* logits, int64_t rows) {
    for (int64_t i = 0; i < rows; ++i) {
      if (!o.all && pos + i != last) continue;
      const float* row = logits + i * V;
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [row](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      PositionTop p{pos + i, r.tokens[static_cast<size_t>(pos + i)], {}};
      for (int64_t j = 0; j < k; ++j) p.top.emplace_back(order[j], row[order[j]]);
      r.positions.push_back(std::move(p));
    }
  });
  return r;
}

void print_text(const LogitsResult& r) {
  for (const PositionTop& p : r.positions) {
    fmt::print("pos {:>4} token {:>6}:", p.pos, p.token);
    for (const auto& [id, v] : p.top) fmt::print(" {}:{:.4f}", id, v);
    fmt::print("\n");
  }
}

void print_json(const LogitsResult& r) {
  nlohmann::json positions = nlohmann::json::array();
  for (const PositionTop& p : r.positions) {
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [id, v] : p.top) top.push_back({id, v});
    positions.push_back({{"pos", p.pos}, {"token", p.token}, {"top", top}});
  }
  cli::print_json({{"tokens", r.tokens}, {"positions", positions}});
}

}  // namespace

void add_logits(CLI::App& app) {
  auto o = std::make_shared<LogitsOptions>();
  auto* cmd = app.add_subcommand("logits", "Print the top-K logits of the last (or every) prompt position");
  add_model_options(cmd, o->m);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (special-token text is parsed)")->required();
  cmd->add_option("--top", o->top, "How many (id, logit) pairs per position")
      ->capture_default_str()
      ->transform(integer_in(1, 1 << 20));
  cmd->add_flag("--all-positions", o->all, "Every prompt position, not only the last");
  cmd->add_flag("--json", o->json, "Print JSON");
  cmd->callback([o] {
    o->m.validate();
    const LogitsResult r = top_logits(*o);
    o->json ? print_json(r) : print_text(r);
  });
}

}  // namespace tally::cli
