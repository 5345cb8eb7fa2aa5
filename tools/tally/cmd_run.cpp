// tally run: generate text from a prompt, streamed to stdout.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "encode_input.h"
#include "output.h"
#include "core/error.h"
#include "model_options.h"
#include "runtime/generator.h"
#include "sampling_options.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"

namespace tally::cli {

void add_run(CLI::App& app) {
  struct Opts {
    ModelOptions m;
    SamplerParams sampling;
    std::string prompt;
    int64_t n_predict = 128;
    bool no_cache = false, chat = false, json = false, ignore_eos = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  add_model_options(cmd, o->m);
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate at most")->capture_default_str();
  add_sampling_options(cmd, o->sampling);
  cmd->add_flag("--no-cache", o->no_cache, "Recompute the whole sequence at every step (the baseline)");
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template as a user turn");
  cmd->add_flag("--json", o->json, "Print one JSON object at the end instead of streaming");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-generation tokens (benchmarks)");
  cmd->callback([o] {
    o->sampling.validate();
    if (o->n_predict < 0) fail("-n must be >= 0, got {}", o->n_predict);
    LoadedModel lm = load_model(o->m);
    const Tokenizer& tok = *lm.tokenizer;
    std::string text = o->prompt;
    if (o->chat) {
      const ChatTemplate tmpl = ChatTemplate::from_gguf(lm.model->file());
      const ChatMessage msg{"user", o->prompt};
      text = tmpl.render(std::span<const ChatMessage>(&msg, 1), true);
    }
    const std::vector<int32_t> prompt = encode_input(tok, text, /*add_special=*/true, /*parse_special=*/true, "the prompt");
    Session session(*lm.model, session_options(o->m, *lm.model, false));

    GenerateOptions g;
    g.max_tokens = o->n_predict;
    g.use_cache = !o->no_cache;
    g.sampling = o->sampling;
    if (!o->ignore_eos) g.is_stop = [&tok](int32_t id) { return tok.is_end_of_generation(id); };
    StreamDecoder stream(tok);
    std::string generated_text;
    const GenerateResult r = generate(session, prompt, g, [&](int32_t id) {
      const std::string piece = stream.push(id);
      generated_text += piece;
      if (!o->json) {
        fmt::print("{}", piece);
        flush_stdout();
      }
    });
    const std::string rest = stream.flush();
    generated_text += rest;
    if (r.stop == GenerateResult::Stop::ContextFull)
      fmt::print(stderr, "tally: warning: stopped: the context of {} tokens is full\n", session.n_ctx());
    if (o->json) {
      nlohmann::json j{
          {"prompt_tokens", r.prompt_tokens},
          {"generated_tokens", r.tokens.size()},
          {"token_ids", r.tokens},
          {"text", generated_text},
          {"timings",
           {{"load_ms", lm.load_ms},
            {"prefill_ms", r.prefill_ms},
            {"decode_ms", r.decode_ms},
            {"prefill_tps", r.prefill_ms > 0 ? r.prompt_tokens * 1000.0 / r.prefill_ms : 0.0},
            {"decode_tps", r.decode_ms > 0 ? r.decode_steps * 1000.0 / r.decode_ms : 0.0}}}};
      print_json(j);
    } else {
      fmt::print("{}\n", rest);
    }
  });
}

}  // namespace tally::cli
