// tally chat: an interactive multi-turn conversation (runtime/conversation.h):
// each turn prefills only the tokens the cache does not already hold; when
// the context fills up, the oldest turns are dropped and the chat goes on.
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "commands.h"
#include "core/error.h"
#include "model_options.h"
#include "runtime/conversation.h"
#include "sampling_options.h"
#include "encode_input.h"
#include "tokenizer/chat_template.h"

namespace tally::cli {

void add_chat(CLI::App& app) {
  struct Opts {
    ModelOptions m;
    SamplerParams sampling;
    std::string system;
    int64_t n_predict = 512;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "chat", "Chat with the model in the terminal (one line per turn; /save FILE, /load FILE; /exit or EOF ends)");
  add_model_options(cmd, o->m);
  add_sampling_options(cmd, o->sampling);
  cmd->add_option("--system", o->system, "System message (default: the template's own)");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens per reply at most")->capture_default_str();
  cmd->callback([o] {
    if (o->n_predict < 1) fail("-n must be at least 1 token per reply, got {}", o->n_predict);
    o->sampling.validate();
    LoadedModel lm = load_model(o->m);
    const Tokenizer& tok = *lm.tokenizer;
    const ChatTemplate tmpl = ChatTemplate::from_gguf(lm.model->file());
    if (tmpl.is_fallback()) warn_not_instruct(o->m.model);
    Session session(*lm.model, session_options(o->m, *lm.model, false));
    Conversation chat(session, tok, tmpl, o->system);

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
      if (line.rfind("/save", 0) == 0 || line.rfind("/load", 0) == 0) {
        const bool save = line[1] == 's';
        if (line.size() > 5 && line[5] != ' ') {
          fmt::print(stderr, "tally: unknown command '{}' (commands: /save FILE, /load FILE, /exit)\n", line);
          continue;
        }
        const std::string file = line.size() > 6 ? line.substr(6) : "";
        if (file.empty()) {
          fmt::print(stderr, "tally: {} needs a file: {} FILE\n", save ? "/save" : "/load", save ? "/save" : "/load");
          continue;
        }
        try {
          if (save) {
            chat.save(file);
            fmt::print(stderr, "[saved {} tokens to {}]\n", session.length(), file);
          } else {
            chat.load(file);
            fmt::print(stderr, "[loaded {} tokens, {} messages from {}]\n", session.length(), chat.messages().size(), file);
          }
        } catch (const Error& e) {
          fmt::print(stderr, "tally: {}\n", e.what());
        }
        continue;
      }
      TurnResult r;
      try {
        r = chat.say(line, g, [](const std::string& piece) {
          fmt::print("{}", piece);
          std::fflush(stdout);
        });
      } catch (const Error& e) {  // this turn is refused; the conversation goes on
        fmt::print(stderr, "tally: {}\n", e.what());
        continue;
      }
      fmt::print("\n");
      std::fflush(stdout);
      if (r.dropped_turns > 0)
        fmt::print(stderr, "[the context of {} tokens was full: the oldest {} turn(s) were dropped]\n",
                   session.n_ctx(), r.dropped_turns);
      if (r.generation.stop == Finish::ContextFull)
        fmt::print(stderr, "[reply cut: the context of {} tokens is full; the next turn drops the oldest turns]\n",
                   session.n_ctx());
      fmt::print(stderr, "[{} new prompt tokens prefilled, {} reused from the cache, {} generated, {:.1f} tok/s]\n",
                 r.prefilled, r.reused, r.generation.tokens.size(),
                 r.generation.decode_ms > 0 ? r.generation.decode_steps * 1000.0 / r.generation.decode_ms : 0.0);
    }
  });
}

}  // namespace tally::cli
