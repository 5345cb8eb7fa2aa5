#include "lab/speculation_experiment.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "lab/held_tasks.h"
#include "runtime/generator.h"
#include "tokenizer/chat_template.h"

namespace tally {

const std::vector<SpeculationTask>& speculation_tasks() {
  static const std::vector<SpeculationTask> tasks = [] {
    const auto j = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(kSpeculativeTasksJson),
                                                          kSpeculativeTasksJsonSize));
    std::vector<SpeculationTask> out;
    for (const char* kind : {"code-edit", "chat"})
      for (const auto& t : j.at(kind)) out.push_back({t.at("name"), kind, t.at("prompt")});
    return out;
  }();
  return tasks;
}

double SpeculationReport::speedup(const SpeculationPoint& p) const {
  for (const SpeculationPoint& base : points)
    if (base.kind == p.kind && base.k == 0 && base.tps() > 0) return p.tps() / base.tps();
  return 0;
}

SpeculationReport measure_speculation(const Model& model, const Tokenizer& tok, const SpeculationExperiment& e,
                                      const std::function<void(int64_t, int64_t)>& progress) {
  if (e.ks.empty()) fail("no draft lengths to measure");
  if (e.gen_tokens < 1) fail("tokens to generate must be at least 1, got {}", e.gen_tokens);
  const int64_t k_max = *std::max_element(e.ks.begin(), e.ks.end());
  if (*std::min_element(e.ks.begin(), e.ks.end()) < 1) fail("draft lengths must be at least 1");
  std::vector<const SpeculationTask*> tasks;
  for (const std::string& kind : e.kinds) {
    const size_t before = tasks.size();
    for (const SpeculationTask& t : speculation_tasks())
      if (t.kind == kind) tasks.push_back(&t);
    if (tasks.size() == before) fail("no held tasks of kind '{}' (code-edit, chat)", kind);
  }
  const ChatTemplate tmpl = chat_template_of(model);
  SessionOptions so;
  so.n_threads = e.n_threads;
  so.cache_type = e.cache_type;
  so.logit_rows = k_max + 1;
  Session s(model, so);
  std::optional<Session> draft;
  if (e.draft != nullptr) {
    SessionOptions d = so;
    d.logit_rows = 0;
    d.n_ctx = s.n_ctx();
    d.threads = s.engine().shared_threads();
    draft.emplace(*e.draft, d);
  }
  std::vector<int64_t> settings{0};
  settings.insert(settings.end(), e.ks.begin(), e.ks.end());
  settings.push_back(-1);

  SpeculationReport r;
  r.source = e.draft != nullptr ? "draft" : "lookup";
  r.gen_tokens = e.gen_tokens;
  for (const std::string& kind : e.kinds)
    for (int64_t k : settings) r.points.push_back({kind, k});
  const int64_t total = static_cast<int64_t>(tasks.size() * settings.size());
  int64_t done = 0;
  for (const SpeculationTask* t : tasks) {
    const std::vector<ChatMessage> msgs = {{"user", t->prompt}};
    const std::vector<int32_t> prompt = tmpl.encode(tok, msgs, true);
    if (static_cast<int64_t>(prompt.size()) + e.gen_tokens + k_max > s.n_ctx())
      fail("task {} needs {} positions, more than the context of {}", t->name,
           static_cast<int64_t>(prompt.size()) + e.gen_tokens + k_max, s.n_ctx());
    std::vector<int32_t> want;
    for (int64_t k : settings) {  // interleaved: each task runs every setting in turn
      s.truncate(0);
      if (draft) draft->truncate(0);  // else it would count the previous run's tokens as rolled back
      GenerateOptions g;
      g.max_tokens = e.gen_tokens;
      g.sampling.temperature = 0;
      g.is_stop = [&tok](int32_t id) { return tok.is_end_of_generation(id); };
      g.draft_max = k == 0 ? 0 : k < 0 ? k_max : k;
      g.fixed_draft = k > 0;
      if (k != 0 && draft) g.draft = &*draft, g.draft_vocab = e.draft_vocab;
      const GenerateResult out = generate(s, prompt, g);
      if (k == 0) want = out.tokens;
      SpeculationPoint& p = *std::find_if(r.points.begin(), r.points.end(),
                                          [&](const SpeculationPoint& x) { return x.kind == t->kind && x.k == k; });
      p.tokens += out.decoded_tokens();
      p.steps += out.decode_steps;
      p.drafted += out.drafted;
      p.accepted += out.accepted;
      p.rolled_back += out.rolled_back;
      p.rolled_back_blocks += out.rolled_back_blocks;
      p.draft_rolled_back += out.draft_rolled_back;
      p.decode_ms += out.decode_ms;
      p.same_tokens = p.same_tokens && out.tokens == want;
      if (progress) progress(++done, total);
    }
  }
  return r;
}

}  // namespace tally
