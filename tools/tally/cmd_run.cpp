// tally run: generate text from a prompt, streamed to stdout; or N sampled
// continuations of it (--parallel), or the best beams (--beam), over forked
// sequences that share the prompt's KV blocks.
#include <fmt/format.h>

#include <chrono>

#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "encode_input.h"
#include "output.h"
#include "core/error.h"
#include "option_checks.h"
#include "model_options.h"
#include "runtime/beam_search.h"
#include "runtime/generator.h"
#include "runtime/parallel.h"
#include "sampling_options.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"

namespace tally::cli {

namespace {
// Sequences --parallel and --beam may fork: each keeps a row of logits (n_vocab floats) besides its blocks.
constexpr int64_t kMaxForks = 1024;
// How a continuation ended, in run's --json ("context_full" kept apart from "length").
const char* finish_name(Finish f) { return f == Finish::ContextFull ? "context_full" : finish_reason(f); }
}  // namespace

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
    std::string save_session, load_session;
    bool stream = false;
    int64_t sinks = 4, window = 0;
    std::vector<std::string> stop;
    int logprobs = -1;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  add_model_options(cmd, o->m);
  auto* prompt_opt = cmd->add_option("-p,--prompt", o->prompt, "Prompt text");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate at most")->capture_default_str();
  add_sampling_options(cmd, o->sampling);
  cmd->add_flag("--no-cache", o->no_cache, "Recompute the whole sequence at every step (the baseline)");
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template as a user turn");
  cmd->add_flag("--json", o->json, "Print one JSON object at the end instead of streaming");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-generation tokens (benchmarks)");
  cmd->add_option("--stop", o->stop, "Stop at this text (repeatable; not printed)")->check(nonempty_text("--stop"));
  auto* logprobs = cmd->add_option("--logprobs", o->logprobs,
                                   "With --json: each generated token's log-probability and the N most likely")
                       ->transform(integer_in(0, 20));
  auto* par = cmd->add_option("--parallel", o->parallel,
                              "N sampled continuations of the prompt, sharing its KV blocks (seeds S, S+1, ...)")
                  ->transform(integer_in(1, kMaxForks));
  auto* beam = cmd->add_option("--beam", o->beam, "Beam search of width W over forked sequences (greedy scoring)")
                   ->transform(integer_in(1, kMaxForks));
  cmd->add_option("--length-penalty", o->length_penalty, "Beam score = sum of log-probs / length^A")
      ->capture_default_str();
  cmd->add_flag("--beam-copy", o->beam_copy, "Beam search with a full copy of the cache per beam (the baseline)");
  cmd->add_flag("--stream", o->stream,
                "Slide the window past the context: keep the first --sinks tokens and the latest ones (-n -1: forever)");
  auto* sinks = cmd->add_option("--sinks", o->sinks, "With --stream: first tokens kept forever (attention sinks)")
                    ->capture_default_str();
  auto* window = cmd->add_option("--window", o->window, "With --stream: positions the cache holds (default: -c)");
  cmd->add_option("--save-session", o->save_session,
                  "After generating, save the cache, its tokens included, to this file (atomically; a regular file "
                  "or a new one)")
      ->check(output_file("session file"));
  cmd->add_option("--load-session", o->load_session,
                  "Continue a saved session: -p (optional) is appended after its tokens, as raw text")
      ->check(nonempty_path());
  cmd->callback([o, par, beam, prompt_opt, sinks, window, logprobs] {
    if ((sinks->count() || window->count()) && !o->stream) fail("--sinks and --window go with --stream");
    if (o->stream && (beam->count() || o->parallel > 1 || o->no_cache))
      fail("--stream slides one sequence's cache: not with --beam, --parallel or --no-cache");
    if (o->stream && o->sinks < 0) fail("--sinks must be >= 0, got {}", o->sinks);
    if (o->stream && window->count() && o->window < 1) fail("--window must be positive, got {}", o->window);
    if (o->stream && window->count()) o->m.ctx = o->window;
    if (!prompt_opt->count() && o->load_session.empty()) fail("give a prompt with -p (or continue a session with --load-session)");
    const bool session_io = !o->save_session.empty() || !o->load_session.empty();
    if (session_io && (beam->count() || o->parallel > 1 || o->no_cache))
      fail("--save-session and --load-session work with one sequence and a cache: not with --beam, --parallel or --no-cache");
    if (!o->load_session.empty() && o->chat)
      fail("--load-session continues the saved tokens with raw text; for a chat use `tally chat` and /load FILE");
    o->sampling.validate();
    if (o->n_predict < 0 && !(o->stream && o->n_predict == -1))
      fail("-n must be >= 0 (or -1 with --stream: no limit), got {}", o->n_predict);
    if (par->count() && o->parallel < 1) fail("--parallel must be at least 1, got {}", o->parallel);
    if (beam->count() && o->beam < 1) fail("--beam must be at least 1, got {}", o->beam);
    if (beam->count() && par->count()) fail("--beam and --parallel do not go together: a beam search keeps its own W sequences");
    if ((beam->count() || o->parallel > 1) && o->no_cache)
      fail("--no-cache recomputes one sequence; --parallel and --beam share a cache between sequences");
    if (o->beam_copy && !beam->count()) fail("--beam-copy needs --beam W");
    if (logprobs->count() && !o->json) fail("--logprobs goes with --json (the log-probabilities are part of the JSON)");
    if (beam->count() && (logprobs->count() || !o->stop.empty()))
      fail("--beam scores its own hypotheses: --logprobs and --stop go with sampling, not with --beam");
    if (beam->count() && o->n_predict < 1) fail("-n must be at least 1 with --beam, got {}", o->n_predict);
    LoadedModel lm = load_model(o->m);
    const Tokenizer& tok = *lm.tokenizer;
    std::vector<int32_t> prompt;
    if (o->chat) {
      const ChatTemplate tmpl = ChatTemplate::from_gguf(lm.model->file());
      if (tmpl.is_fallback()) warn_not_instruct(o->m.model);
      const ChatMessage msg{"user", o->prompt};
      prompt = tmpl.encode(tok, std::span<const ChatMessage>(&msg, 1), true);
    } else if (o->load_session.empty() || !o->prompt.empty()) {
      prompt = encode_input(tok, o->prompt, /*add_special=*/o->load_session.empty(), /*parse_special=*/true, "the prompt");
    }
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
    if (o->stream) g.sinks = o->sinks;
    g.use_cache = !o->no_cache;
    g.sampling = o->sampling;
    g.is_stop = stop;
    g.stop = o->stop;
    g.top_logprobs = o->logprobs;
    auto logprob_json = [&tok](const Emission& e) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, lp] : e.top) top.push_back({{"id", id}, {"token", tok.token_bytes(id, false)}, {"logprob", lp}});
      return nlohmann::json{{"id", e.token}, {"token", tok.token_bytes(e.token, false)}, {"logprob", e.logprob}, {"top", top}};
    };
    if (o->parallel > 1) {
      Engine engine(*lm.model, engine_options(o->m, *lm.model));
      std::vector<nlohmann::json> lps(static_cast<size_t>(o->parallel), nlohmann::json::array());
      const ParallelResult r = generate_parallel(
          engine, prompt, o->parallel, g,
          [&](int i, const Emission& e) {
            if (o->logprobs >= 0 && e.token >= 0) lps[static_cast<size_t>(i)].push_back(logprob_json(e));
          },
          &tok);
      nlohmann::json all = nlohmann::json::array();
      for (size_t i = 0; i < r.continuations.size(); ++i) {
        const GenerateResult& c = r.continuations[i];
        if (o->json) {
          nlohmann::json one{{"text", c.text}, {"token_ids", c.tokens}, {"generated_tokens", c.tokens.size()},
                             {"finish", finish_name(c.stop)}, {"seed", o->sampling.seed + i}};
          if (o->logprobs >= 0) one["logprobs"] = lps[i];
          all.push_back(std::move(one));
        } else {
          fmt::print("--- {} of {} (seed {}, {}) ---\n{}\n", i + 1, r.continuations.size(), o->sampling.seed + i,
                     finish_name(c.stop), c.text);
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
    double session_load_ms = 0;
    int64_t session_tokens = 0;
    if (!o->load_session.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      session.load(o->load_session);
      session_load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      session_tokens = session.length();
      if (session.length() == 0) fail("{}: the saved session holds no tokens", o->load_session);
      // The file holds no logits: its last token is evaluated again (the same bits), then the new prompt.
      const int32_t last = session.tokens().back();
      session.truncate(session.length() - 1);
      prompt.insert(prompt.begin(), last);
    }
    nlohmann::json lps = nlohmann::json::array();
    const GenerateResult r = generate(
        session, prompt, g,
        [&](const Emission& e) {
          if (o->logprobs >= 0 && e.token >= 0) lps.push_back(logprob_json(e));
          if (!o->json && !e.text.empty()) {
            fmt::print("{}", e.text);
            flush_stdout();
          }
        },
        &tok);
    if (r.stop == Finish::ContextFull)
      fmt::print(stderr, "tally: warning: stopped: the context of {} tokens is full\n", session.n_ctx());
    if (!o->save_session.empty()) {
      // Unless generation ended at a stop token, the last token chosen is not in the
      // cache yet: evaluate it, so that the file holds the whole text.
      if (r.stop != Finish::EndToken && !r.tokens.empty() && session.length() < session.n_ctx())
        session.append(std::span<const int32_t>(&r.tokens.back(), 1));
      session.save(o->save_session);
    }
    if (o->json) {
      nlohmann::json j{
          {"prompt_tokens", r.prompt_tokens},
          {"generated_tokens", r.tokens.size()},
          {"token_ids", r.tokens},
          {"text", r.text},
          {"finish", finish_name(r.stop)},
          {"kv", {{"cache_bytes", session.cache().storage().bytes()},
                  {"window_slots", session.cache().stats().window_slots}}},
          {"timings",
           {{"load_ms", lm.load_ms},
            {"prefill_ms", r.prefill_ms},
            {"decode_ms", r.decode_ms},
            {"prefill_tps", tps(static_cast<double>(r.prompt_tokens), r.prefill_ms)},
            {"decode_tps", tps(static_cast<double>(r.decode_steps), r.decode_ms)}}}};
      if (o->logprobs >= 0) j["logprobs"] = lps;
      if (!o->load_session.empty()) {
        j["timings"]["session_load_ms"] = session_load_ms;
        j["session_tokens"] = session_tokens;
      }
      print_json(j);
    } else {
      fmt::print("\n");
    }
  });
}

}  // namespace tally::cli
