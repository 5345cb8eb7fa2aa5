// tally chat: an interactive multi-turn conversation. Each turn renders the
// whole conversation with the chat template, keeps the cached prefix that
// still matches and prefills only the new tokens.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "model_options.h"
#include "runtime/generator.h"
#include "sampling_options.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"

namespace tally::cli {

void add_chat(CLI::App& app) {
  struct Opts {
    ModelOptions m;
    SamplerParams sampling;
    std::string system;
    int64_t n_predict = 512;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("chat", "Chat with the model in the terminal (one line per turn; /exit or EOF ends)");
  add_model_options(cmd, o->m);
  add_sampling_options(cmd, o->sampling);
  cmd->add_option("--system", o->system, "System message (default: the template's own)");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens per reply at most")->capture_default_str();
  cmd->callback([o] {
    o->sampling.validate();
    LoadedModel lm = load_model(o->m);
    const Tokenizer& tok = *lm.tokenizer;
    const ChatTemplate tmpl = ChatTemplate::from_gguf(lm.model->file());
    Session session(*lm.model, session_options(o->m, *lm.model, false));
    std::vector<ChatMessage> messages;
    if (!o->system.empty()) messages.push_back({"system", o->system});

    GenerateOptions g;
    g.max_tokens = o->n_predict;
    g.sampling = o->sampling;
    g.is_stop = [&tok](int32_t id) { return tok.is_end_of_generation(id); };

    std::string line;
    for (;;) {
      fmt::print("> ");
      std::fflush(stdout);
      if (!std::getline(std::cin, line) || line == "/exit") break;
      if (line.empty()) continue;
      messages.push_back({"user", line});
      const auto ids = tok.encode(tmpl.render(messages, true), true, true);
      // Reuse the longest cached prefix; roll back whatever no longer matches.
      size_t keep = 0;
      const auto& cached = session.tokens();
      while (keep < cached.size() && keep < ids.size() && cached[keep] == ids[keep]) ++keep;
      if (keep == ids.size()) --keep;  // the last token must be evaluated for fresh logits
      session.truncate(static_cast<int64_t>(keep));
      StreamDecoder stream(tok);
      std::string reply;
      const auto new_tokens = std::span<const int32_t>(ids).subspan(keep);
      const GenerateResult r = generate(session, new_tokens, g, [&](int32_t id) {
        const std::string piece = stream.push(id);
        reply += piece;
        fmt::print("{}", piece);
        std::fflush(stdout);
      });
      const std::string rest = stream.flush();
      reply += rest;
      fmt::print("{}\n", rest);
      std::fflush(stdout);
      fmt::print(stderr, "[{} new prompt tokens prefilled, {} reused from the cache, {} generated, {:.1f} tok/s]\n",
                 new_tokens.size(), keep, r.tokens.size(),
                 r.decode_ms > 0 ? r.decode_steps * 1000.0 / r.decode_ms : 0.0);
      messages.push_back({"assistant", reply});
    }
  });
}

}  // namespace tally::cli
