// tally run: generate text from a prompt, streamed to stdout; or N sampled
// continuations of it (--parallel), or the best beams (--beam), over forked
// sequences that share the prompt's KV blocks.
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "encode_input.h"
#include "output.h"
#include "core/error.h"
#include "model_options.h"
#include "runtime/beam_search.h"
#include "runtime/generator.h"
#include "runtime/parallel.h"
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
    int parallel = 1, beam = 0;
    double length_penalty = 1.0;
    bool beam_copy = false;
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
  auto* par = cmd->add_option("--parallel", o->parallel,
                              "N sampled continuations of the prompt, sharing its KV blocks (seeds S, S+1, ...)");
  auto* beam = cmd->add_option("--beam", o->beam, "Beam search of width W over forked sequences (greedy scoring)");
  cmd->add_option("--length-penalty", o->length_penalty, "Beam score = sum of log-probs / length^A")
      ->capture_default_str();
  cmd->add_flag("--beam-copy", o->beam_copy, "Beam search with a full copy of the cache per beam (the baseline)");
  cmd->callback([o, par, beam] {
    o->sampling.validate();
    if (o->n_predict < 0) fail("-n must be >= 0, got {}", o->n_predict);
    if (par->count() && o->parallel < 1) fail("--parallel must be at least 1, got {}", o->parallel);
    if (beam->count() && o->beam < 1) fail("--beam must be at least 1, got {}", o->beam);
    if (beam->count() && par->count()) fail("--beam and --parallel do not go together: a beam search keeps its own W sequences");
    if ((beam->count() || o->parallel > 1) && o->no_cache)
      fail("--no-cache recomputes one sequence; --parallel and --beam share a cache between sequences");
    if (o->beam_copy && !beam->count()) fail("--beam-copy needs --beam W");
    if (beam->count() && o->n_predict < 1) fail("-n must be at least 1 with --beam, got {}", o->n_predict);
    LoadedModel lm = load_model(o->m);
    const Tokenizer& tok = *lm.tokenizer;
    std::string text = o->prompt;
    if (o->chat) {
      const ChatTemplate tmpl = ChatTemplate::from_gguf(lm.model->file());
      const ChatMessage msg{"user", o->prompt};
      text = tmpl.render(std::span<const ChatMessage>(&msg, 1), true);
    }
    const std::vector<int32_t> prompt = encode_input(tok, text, /*add_special=*/true, /*parse_special=*/true, "the prompt");
    auto stop = [&tok, o](int32_t id) { return !o->ignore_eos && tok.is_end_of_generation(id); };
    auto text_of = [&tok](std::span<const int32_t> ids) {
      StreamDecoder d(tok);
      std::string t;
      for (int32_t id : ids) t += d.push(id);
      return t + d.flush();
    };
    auto tps = [](double n, double ms) { return ms > 0 ? n * 1000.0 / ms : 0.0; };
    if (beam->count()) {
      Engine engine(*lm.model, engine_options(o->m, *lm.model));
      BeamOptions b;
      b.width = o->beam;
      b.max_tokens = o->n_predict;
      b.length_penalty = o->length_penalty;
      b.copy_caches = o->beam_copy;
      b.is_stop = stop;
      const BeamResult r = beam_search(engine, prompt, b);
      if (o->json) {
        nlohmann::json beams = nlohmann::json::array();
        for (const auto& h : r.hypotheses)
          beams.push_back({{"text", text_of(h.tokens)}, {"token_ids", h.tokens}, {"score", h.score},
                           {"sum_logprobs", h.sum_logprobs}});
        nlohmann::json j{{"prompt_tokens", r.prompt_tokens},
                         {"beams", beams},
                         {"kv", {{"peak_held_bytes", r.peak_held_bytes}, {"copied_bytes", r.copied_bytes}}},
                         {"timings",
                          {{"load_ms", lm.load_ms}, {"prefill_ms", r.prefill_ms}, {"decode_ms", r.decode_ms},
                           {"decode_steps", r.steps}}}};
        print_json(j);
      } else {
        fmt::print("{}\n", r.hypotheses.empty() ? std::string() : text_of(r.hypotheses.front().tokens));
      }
      return;
    }
    GenerateOptions g;
    g.max_tokens = o->n_predict;
    g.use_cache = !o->no_cache;
    g.sampling = o->sampling;
    g.is_stop = stop;
    if (o->parallel > 1) {
      Engine engine(*lm.model, engine_options(o->m, *lm.model));
      const ParallelResult r = generate_parallel(engine, prompt, o->parallel, g);
      nlohmann::json all = nlohmann::json::array();
      for (size_t i = 0; i < r.continuations.size(); ++i) {
        const GenerateResult& c = r.continuations[i];
        const std::string text = text_of(c.tokens);
        const char* finish = c.stop == GenerateResult::Stop::EndToken ? "stop"
                             : c.stop == GenerateResult::Stop::MaxTokens ? "length"
                                                                          : "context_full";
        if (o->json) {
          all.push_back({{"text", text}, {"token_ids", c.tokens}, {"generated_tokens", c.tokens.size()},
                         {"finish", finish}, {"seed", o->sampling.seed + i}});
        } else {
          fmt::print("--- {} of {} (seed {}, {}) ---\n{}\n", i + 1, r.continuations.size(), o->sampling.seed + i,
                     finish, text);
        }
      }
      if (o->json) {
        int64_t generated = 0;
        for (const auto& c : r.continuations) generated += static_cast<int64_t>(c.tokens.size());
        const double decode_ms = r.continuations.empty() ? 0 : r.continuations.front().decode_ms;
        nlohmann::json j{{"prompt_tokens", prompt.size()},
                         {"continuations", all},
                         {"kv", {{"peak_held_bytes", r.peak_held_bytes}}},
                         {"timings",
                          {{"load_ms", lm.load_ms},
                           {"prefill_ms", r.continuations.front().prefill_ms},
                           {"prefill_tps", tps(static_cast<double>(prompt.size()), r.continuations.front().prefill_ms)},
                           {"decode_tps", tps(static_cast<double>(generated), decode_ms)}}}};
        print_json(j);
      }
      return;
    }
    Session session(*lm.model, session_options(o->m, *lm.model, false));
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
            {"prefill_tps", tps(static_cast<double>(r.prompt_tokens), r.prefill_ms)},
            {"decode_tps", tps(static_cast<double>(r.decode_steps), r.decode_ms)}}}};
      print_json(j);
    } else {
      fmt::print("{}\n", rest);
    }
  });
}

}  // namespace tally::cli
