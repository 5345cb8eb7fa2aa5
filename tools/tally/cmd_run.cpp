// tally run: generate text from a prompt, streamed to stdout; or N sampled
// continuations of it (--parallel), or the best beams (--beam), over forked
// sequences that share the prompt's KV blocks. One function per mode returns
// its result; one printer per result writes it.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "constraint_options.h"
#include "core/error.h"
#include "encode_input.h"
#include "grammar/grammar.h"
#include "io/text_file.h"
#include "kv/kv_disk.h"
#include "model_options.h"
#include "option_checks.h"
#include "output.h"
#include "runtime/beam_search.h"
#include "runtime/generator.h"
#include "runtime/parallel.h"
#include "sampling_options.h"
#include "speculation_options.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/stream_decoder.h"
#include "usage.h"

namespace tally::cli {

namespace {

struct RunOptions {
  ModelOptions m;
  SamplingOptions sampling;
  SpeculationOptions speculation;
  std::string prompt, file, system;
  int64_t n_predict = 128;
  bool no_cache = false, chat = false, json = false, ignore_eos = false, verbose = false;
  int64_t parallel = 1, beam = 0;
  double length_penalty = 1.0;
  bool beam_copy = false;
  std::string save_session, load_session;
  bool stream_alias = false;  // --stream, the old spelling of a sliding window
  int64_t sinks = 4, window = 0;
  std::vector<std::string> stop;
  int64_t logprobs = -1;
  ConstraintOptions constraint;
  // Which flags were given (CLI11's counts, copied before validate()).
  struct Given {
    bool prompt = false, file = false, parallel = false, beam = false, length_penalty = false, sinks = false,
         window = false, logprobs = false;
  } given;

  // StreamingLLM's window: --sinks and/or --window (or the old --stream).
  bool sliding() const { return given.sinks || given.window || stream_alias; }
  bool several() const { return given.beam || parallel > 1; }
  void validate() const;
};

void RunOptions::validate() const {
  m.validate();
  sampling.validate();
  speculation.validate();
  constraint.validate();
  if (speculation.on() && (several() || no_cache || sliding()))
    usage_fail("--speculate rolls back one sequence's cache: not with --beam, --parallel, --no-cache or a sliding "
               "window (--sinks/--window)");
  if (given.prompt && given.file) usage_fail("-p and -f both give the prompt: give one");
  if (!system.empty() && !chat) usage_fail("--system is the chat template's system message: it goes with --chat");
  if (sliding() && (several() || no_cache))
    usage_fail("a sliding window (--sinks/--window) slides one sequence's cache: not with --beam, --parallel or "
               "--no-cache");
  if (given.window && m.ctx != 0) usage_fail("--window sets the context of a sliding window: give it or -c, not both");
  const bool session_io = !save_session.empty() || !load_session.empty();
  if (session_io && (several() || no_cache))
    usage_fail("--save-session and --load-session work with one sequence and a cache: not with --beam, --parallel or "
               "--no-cache");
  if (!load_session.empty() && chat)
    usage_fail("--load-session continues the saved tokens with raw text; for a chat use `tally chat` and /load FILE");
  if (n_predict == -1 && !sliding())
    usage_fail("-n -1 (no limit) needs a sliding window (--sinks N): without one, generation stops at the context");
  if (given.beam && given.parallel) usage_fail("--beam and --parallel do not go together: a beam search keeps its own W sequences");
  if (several() && no_cache) usage_fail("--no-cache recomputes one sequence; --parallel and --beam share a cache between sequences");
  if (m.no_prefix_cache && !several())
    usage_fail("--no-prefix-cache is for several sequences (--parallel or --beam): one sequence shares no prompt");
  if (beam_copy && !given.beam) usage_fail("--beam-copy needs --beam W");
  if (given.length_penalty && !given.beam) usage_fail("--length-penalty scores beams: it needs --beam W");
  if (given.logprobs && !json) usage_fail("--logprobs goes with --json (the log-probabilities are part of the JSON)");
  if (given.beam && (given.logprobs || !stop.empty()))
    usage_fail("--beam scores its own hypotheses: --logprobs and --stop go with sampling, not with --beam");
  if (given.beam && n_predict < 1) usage_fail("-n must be at least 1 with --beam, got {}", n_predict);
  const bool constrained = constraint.on();
  if (constrained && given.beam) usage_fail("--beam scores its own hypotheses: --json-schema and --grammar go with sampling");
  if (constrained && ignore_eos)
    usage_fail("--ignore-eos with --json-schema or --grammar: the grammar decides where the output may end");
  if (constrained && sliding())
    usage_fail("--json-schema and --grammar make one bounded output: not with a sliding window (--sinks/--window)");
}

// The prompt's text: -p, -f FILE, or standard input when it is not a terminal.
std::string prompt_text(const RunOptions& o) {
  if (o.given.file) return read_text_file(o.file, "prompt file", kMaxTextBytes);
  if (o.given.prompt) return o.prompt;
  if (!o.load_session.empty()) return "";
  if (isatty(STDIN_FILENO))
    usage_fail("give a prompt: -p TEXT, -f FILE, or on standard input (or continue a session with --load-session)");
  return read_text_file("/dev/stdin", "standard input", kMaxTextBytes);
}

std::vector<int32_t> prompt_tokens(const RunOptions& o, const LoadedModel& lm, const std::string& text) {
  const Tokenizer& tok = *lm.tokenizer;
  if (o.chat) {
    const ChatTemplate tmpl = chat_template_of(*lm.model);
    if (tmpl.is_fallback()) warn_not_instruct(lm.name);
    std::vector<ChatMessage> msgs;
    if (!o.system.empty()) msgs.push_back({"system", o.system});
    msgs.push_back({"user", text});
    return tmpl.encode(tok, msgs, true);
  }
  if (!o.load_session.empty() && text.empty()) return {};
  return encode_input(tok, text, /*add_special=*/o.load_session.empty(), /*parse_special=*/true, "the prompt");
}

// How a continuation ended, in run's --json ("context_full" kept apart from "length").
const char* finish_name(Finish f) { return f == Finish::ContextFull ? "context_full" : finish_reason(f); }

double tps(double n, double ms) { return ms > 0 ? n * 1000.0 / ms : 0.0; }

std::string text_of(const Tokenizer& tok, std::span<const int32_t> ids) {
  StreamDecoder d(tok);
  std::string t;
  for (int32_t id : ids) t += d.push(id);
  return t + d.flush();
}

nlohmann::json logprob_json(const Tokenizer& tok, const Emission& e) {
  nlohmann::json top = nlohmann::json::array();
  for (const auto& [id, lp] : e.top) top.push_back({{"id", id}, {"token", tok.token_bytes(id, false)}, {"logprob", lp}});
  return {{"id", e.token}, {"token", tok.token_bytes(e.token, false)}, {"logprob", e.logprob}, {"top", top}};
}

GenerateOptions generate_options(const RunOptions& o, const Tokenizer& tok, uint64_t seed,
                                 const std::optional<grammar::Constraint>& constraint) {
  GenerateOptions g;
  g.constraint = constraint;
  g.max_tokens = o.n_predict;
  if (o.sliding()) g.sinks = o.sinks;
  g.use_cache = !o.no_cache;
  g.sampling = o.sampling.params;
  g.sampling.seed = seed;
  g.is_stop = [&tok, ignore = o.ignore_eos](int32_t id) { return !ignore && tok.is_end_of_generation(id); };
  g.stop = o.stop;
  g.top_logprobs = static_cast<int>(o.logprobs);
  o.speculation.apply(g);
  return g;
}

// ---- one sequence

struct SingleRun {
  GenerateResult gen;
  uint64_t seed = 0;
  double load_ms = 0;
  int64_t n_ctx = 0;
  uint64_t cache_bytes = 0;
  int64_t window_slots = 0;
  KvDiskStats disk;            // with --cache-dir
  int64_t session_tokens = 0;  // with --load-session: the tokens it held
  double session_load_ms = 0;
  nlohmann::json logprobs = nlohmann::json::array();
};

SingleRun run_single(const RunOptions& o, const LoadedModel& lm, std::vector<int32_t> prompt, uint64_t seed,
                     const std::optional<grammar::Constraint>& constraint,
                     const std::function<void(const std::string&)>& on_text) {
  SingleRun out;
  out.seed = seed;
  out.load_ms = lm.load_ms;
  const Tokenizer& tok = *lm.tokenizer;
  SessionOptions so = session_options(o.m, *lm.model, false);
  if (o.given.window) so.n_ctx = o.window;
  o.speculation.apply(so);
  const std::unique_ptr<Session> owned = open_session(*lm.model, so);
  Session& session = *owned;
  out.n_ctx = session.n_ctx();
  o.speculation.check_context(session.n_ctx());
  if (o.sliding()) {
    try {
      session.check_window(o.sinks);
    } catch (const Error& e) {
      usage_fail("--window {} with --sinks {}: {}", session.n_ctx(), o.sinks, e.what());
    }
  }
  if (!o.load_session.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    session.load(o.load_session);
    out.session_load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    out.session_tokens = session.length();
    if (session.length() == 0) fail("{}: the saved session holds no tokens", o.load_session);
    // The file holds no logits: its last token is evaluated again (the same bits), then the new prompt.
    const int32_t last = session.tokens().back();
    session.truncate(session.length() - 1);
    prompt.insert(prompt.begin(), last);
  }
  if (!o.sliding() && session.length() + static_cast<int64_t>(prompt.size()) > session.n_ctx())
    fail("the prompt has {} tokens, more than the {} left in the context of {} (raise -c)", prompt.size(),
         session.n_ctx() - session.length(), session.n_ctx());
  GenerateOptions g = generate_options(o, tok, seed, constraint);
  const std::unique_ptr<DraftRun> draft = open_draft(o.speculation, o.m, lm, session);
  if (draft) g.draft = draft->session.get();
  const int64_t start = session.length();
  out.gen = generate(
      session, prompt, g,
      [&](const Emission& e) {
        if (o.logprobs >= 0 && e.token >= 0) out.logprobs.push_back(logprob_json(tok, e));
        if (!e.text.empty() && on_text) on_text(e.text);
      },
      &tok);
  if (!o.save_session.empty()) {
    // Unless generation ended at a stop token, the last token chosen is not in the
    // cache yet: evaluate it, so that the file holds the whole text.
    // (A kept guess is in the cache already.)
    const int64_t held = start + static_cast<int64_t>(prompt.size()) + static_cast<int64_t>(out.gen.tokens.size());
    if (out.gen.stop != Finish::EndToken && !out.gen.tokens.empty() && session.length() < held &&
        session.length() < session.n_ctx())
      session.append(std::span<const int32_t>(&out.gen.tokens.back(), 1));
    session.save(o.save_session);
  }
  out.cache_bytes = session.cache().storage().bytes();
  const KvCacheStats stats = session.cache().stats();
  out.window_slots = stats.window_slots;
  out.disk = stats.disk;
  return out;
}

void print_json(const RunOptions& o, const SingleRun& r) {
  const GenerateResult& g = r.gen;
  nlohmann::json j{{"prompt_tokens", g.prompt_tokens},
                   {"generated_tokens", g.tokens.size()},
                   {"token_ids", g.tokens},
                   {"text", g.text},
                   {"finish", finish_name(g.stop)},
                   {"seed", r.seed},
                   {"kv", {{"cache_bytes", r.cache_bytes}, {"window_slots", r.window_slots}}},
                   {"timings",
                    {{"load_ms", r.load_ms},
                     {"prefill_ms", g.prefill_ms},
                     {"decode_ms", g.decode_ms},
                     {"prefill_tps", tps(static_cast<double>(g.prompt_tokens - g.cached_tokens), g.prefill_ms)},
                     {"decode_tps", tps(static_cast<double>(g.decoded_tokens()), g.decode_ms)}}}};
  if (o.logprobs >= 0) j["logprobs"] = r.logprobs;
  if (!o.m.cache_dir.empty()) {
    j["kv"]["cached_tokens"] = {{"total", g.cached_tokens}, {"disk", g.disk_tokens}};
    j["kv"]["disk_blocks"] = {{"loaded", r.disk.hits},
                              {"written", r.disk.written},
                              {"write_errors", r.disk.write_errors},
                              {"corrupt", r.disk.corrupt},
                              {"load_ms", r.disk.load_seconds * 1000.0}};
  }
  if (o.speculation.on())
    j["speculation"] = {{"source", o.speculation.source()}, {"drafted", g.drafted},       {"accepted", g.accepted},
                        {"rolled_back", g.rolled_back},   {"draft_rolled_back", g.draft_rolled_back},
                        {"decode_steps", g.decode_steps}};
  if (!o.load_session.empty()) {
    j["timings"]["session_load_ms"] = r.session_load_ms;
    j["session_tokens"] = r.session_tokens;
  }
  cli::print_json(j);
}

// llama-cli's performance summary, on one line of stderr.
void print_perf(const SingleRun& r) {
  const GenerateResult& g = r.gen;
  fmt::print(stderr,
             "[load {:.0f} ms; {} prompt tokens prefilled at {:.1f} tok/s, {} reused from the cache{}; {} generated "
             "at {:.1f} tok/s; finish: {}; seed {}]\n",
             r.load_ms, g.prompt_tokens - g.cached_tokens,
             tps(static_cast<double>(g.prompt_tokens - g.cached_tokens), g.prefill_ms), r.session_tokens + g.cached_tokens,
             g.disk_tokens > 0 ? fmt::format(" ({} from disk)", g.disk_tokens) : std::string(), g.tokens.size(), tps(static_cast<double>(g.decoded_tokens()), g.decode_ms), finish_name(g.stop), r.seed);
  if (g.drafted > 0)
    fmt::print(stderr, "[speculation: {} of {} guesses kept ({:.0f}%), {:.2f} tokens per step]\n", g.accepted, g.drafted,
               100.0 * static_cast<double>(g.accepted) / static_cast<double>(g.drafted),
               g.decode_steps > 0 ? static_cast<double>(g.decoded_tokens()) / static_cast<double>(g.decode_steps) : 0.0);
}

// ---- N continuations

struct ParallelRun {
  ParallelResult result;
  int64_t prompt_tokens = 0;
  uint64_t seed = 0;
  double load_ms = 0;
  std::vector<nlohmann::json> logprobs;
};

ParallelRun run_parallel(const RunOptions& o, const LoadedModel& lm, const std::vector<int32_t>& prompt,
                         uint64_t seed, const std::optional<grammar::Constraint>& constraint) {
  ParallelRun out;
  out.seed = seed;
  out.load_ms = lm.load_ms;
  out.prompt_tokens = static_cast<int64_t>(prompt.size());
  const Tokenizer& tok = *lm.tokenizer;
  const std::unique_ptr<Engine> engine = open_engine(*lm.model, engine_options(o.m, *lm.model));
  out.logprobs.assign(static_cast<size_t>(o.parallel), nlohmann::json::array());
  out.result = generate_parallel(
      *engine, prompt, static_cast<int>(o.parallel), generate_options(o, tok, seed, constraint),
      [&](int i, const Emission& e) {
        if (o.logprobs >= 0 && e.token >= 0) out.logprobs[static_cast<size_t>(i)].push_back(logprob_json(tok, e));
      },
      &tok);
  return out;
}

void print_text(const ParallelRun& r) {
  const auto& cs = r.result.continuations;
  for (size_t i = 0; i < cs.size(); ++i)
    fmt::print("--- {} of {} (seed {}, {}) ---\n{}\n", i + 1, cs.size(), r.seed + i, finish_name(cs[i].stop),
               cs[i].text);
}

void print_json(const RunOptions& o, const ParallelRun& r) {
  nlohmann::json all = nlohmann::json::array();
  int64_t generated = 0;
  const auto& cs = r.result.continuations;
  for (size_t i = 0; i < cs.size(); ++i) {
    const GenerateResult& c = cs[i];
    generated += static_cast<int64_t>(c.tokens.size());
    nlohmann::json one{{"text", c.text}, {"token_ids", c.tokens}, {"generated_tokens", c.tokens.size()},
                       {"finish", finish_name(c.stop)}, {"seed", r.seed + i}};
    if (o.logprobs >= 0) one["logprobs"] = r.logprobs[i];
    all.push_back(std::move(one));
  }
  const double prefill_ms = cs.empty() ? 0 : cs.front().prefill_ms;
  const double decode_ms = cs.empty() ? 0 : cs.front().decode_ms;
  cli::print_json({{"prompt_tokens", r.prompt_tokens},
              {"seed", r.seed},
              {"continuations", all},
              {"kv", {{"peak_held_bytes", r.result.peak_held_bytes}}},
              {"timings",
               {{"load_ms", r.load_ms},
                {"prefill_ms", prefill_ms},
                {"prefill_tps", tps(static_cast<double>(r.prompt_tokens), prefill_ms)},
                {"decode_tps", tps(static_cast<double>(generated), decode_ms)}}}});
}

// ---- beam search

struct BeamRun {
  BeamResult result;
  double load_ms = 0;
};

BeamRun run_beam(const RunOptions& o, const LoadedModel& lm, const std::vector<int32_t>& prompt) {
  const std::unique_ptr<Engine> engine = open_engine(*lm.model, engine_options(o.m, *lm.model));
  BeamOptions b;
  b.width = static_cast<int>(o.beam);
  b.max_tokens = o.n_predict;
  b.length_penalty = o.length_penalty;
  b.copy_caches = o.beam_copy;
  b.is_stop = [&tok = *lm.tokenizer, ignore = o.ignore_eos](int32_t id) {
    return !ignore && tok.is_end_of_generation(id);
  };
  return {beam_search(*engine, prompt, b), lm.load_ms};
}

void print_text(const Tokenizer& tok, const BeamRun& r) {
  const auto& hs = r.result.hypotheses;
  fmt::print("{}\n", hs.empty() ? std::string() : text_of(tok, hs.front().tokens));
}

void print_json(const Tokenizer& tok, const BeamRun& br) {
  const BeamResult& r = br.result;
  nlohmann::json beams = nlohmann::json::array();
  for (const auto& h : r.hypotheses)
    beams.push_back({{"text", text_of(tok, h.tokens)}, {"token_ids", h.tokens}, {"score", h.score},
                     {"sum_logprobs", h.sum_logprobs}});
  cli::print_json({{"prompt_tokens", r.prompt_tokens},
              {"beams", beams},
              {"kv", {{"peak_held_bytes", r.peak_held_bytes}, {"copied_bytes", r.copied_bytes}}},
              {"timings",
               {{"load_ms", br.load_ms}, {"prefill_ms", r.prefill_ms}, {"decode_ms", r.decode_ms},
                {"decode_steps", r.steps}}}});
}

void execute(const RunOptions& o) {
  if (o.stream_alias)
    fmt::print(stderr, "tally: warning: --stream is now spelled --sinks N [--window W]: it slides the cache past the "
                       "context (StreamingLLM); run streams its output without it{}\n",
               o.json ? ", and --json prints one object at the end" : "");
  const std::string text = prompt_text(o);
  LoadedModel lm = load_model(o.m);
  const std::vector<int32_t> prompt = prompt_tokens(o, lm, text);
  if (prompt.empty() && o.load_session.empty()) fail("the prompt is empty: nothing to generate from");
  const Tokenizer& tok = *lm.tokenizer;
  const std::optional<grammar::Constraint> constraint = o.constraint.build(lm);
  if (o.given.beam) {
    const BeamRun r = run_beam(o, lm, prompt);
    o.json ? print_json(tok, r) : print_text(tok, r);
    return;
  }
  const uint64_t seed = o.sampling.resolve().seed;
  if (o.verbose) fmt::print(stderr, "tally: seed {}\n", seed);
  if (o.parallel > 1) {
    const ParallelRun r = run_parallel(o, lm, prompt, seed, constraint);
    o.json ? print_json(o, r) : print_text(r);
    return;
  }
  const SingleRun r = run_single(o, lm, prompt, seed, constraint, [&](const std::string& piece) {
    if (o.json) return;
    fmt::print("{}", piece);
    flush_stdout();
  });
  if (r.gen.stop == Finish::ContextFull)
    fmt::print(stderr, "tally: warning: stopped: the context of {} tokens is full\n", r.n_ctx);
  if (r.disk.write_errors > 0) fmt::print(stderr, "tally: warning: {}\n", describe_write_errors(r.disk));
  if (o.json) {
    print_json(o, r);
  } else {
    fmt::print("\n");
    flush_stdout();
  }
  if (o.verbose || (!o.json && isatty(STDERR_FILENO))) print_perf(r);
}

}  // namespace

void add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  add_model_options(cmd, o->m, kRunning | kPrefixCache | kDiskCache);
  auto* prompt = cmd->add_option("-p,--prompt", o->prompt, "Prompt text (default: standard input when it is not a terminal)");
  auto* file = cmd->add_option("-f,--file", o->file, "Read the prompt from FILE")->check(nonempty_path());
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens to generate at most (-1: no limit, with --sinks)")
                ->capture_default_str()
                ->transform(integer_in(-1, kMaxContextTokens));
  add_sampling_options(cmd, o->sampling);
  add_speculation_options(cmd, o->speculation);
  cmd->add_flag("--no-cache", o->no_cache, "Recompute the whole sequence at every step (the baseline)");
  cmd->add_flag("--chat", o->chat, "Wrap the prompt in the model's chat template as a user turn");
  cmd->add_option("--system,--system-prompt", o->system, "With --chat: a system message before the prompt")
      ->check(nonempty_text("--system"));
  cmd->add_flag("--json", o->json, "Print one JSON object at the end instead of streaming");
  cmd->add_flag("-v,--verbose", o->verbose, "Print the seed at the start and the speed line at the end");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at end-of-generation tokens (benchmarks)");
  cmd->add_option("--stop", o->stop, "Stop at this text (repeatable; not printed)")->check(nonempty_text("--stop"));
  auto* logprobs = cmd->add_option("--logprobs", o->logprobs,
                                   "With --json: each generated token's log-probability and the N most likely")
                       ->transform(integer_in(0, 20));
  auto* par = cmd->add_option("--parallel", o->parallel,
                              "N sampled continuations of the prompt, sharing its KV blocks (seeds S, S+1, ...)")
                  ->transform(integer_in(1, kMaxParallel));
  auto* beam = cmd->add_option("--beam", o->beam, "Beam search of width W over forked sequences (greedy scoring)")
                   ->transform(integer_in(1, kMaxParallel));
  auto* lp = cmd->add_option("--length-penalty", o->length_penalty, "With --beam: score = sum of log-probs / length^A")
                 ->capture_default_str()
                 ->transform(real_in(-10, 10));
  cmd->add_flag("--beam-copy", o->beam_copy, "Beam search with a full copy of the cache per beam (the baseline)");
  auto* sinks = cmd->add_option("--sinks", o->sinks,
                                "Slide the cache past the context (StreamingLLM): keep the first N tokens "
                                "(attention sinks) and the latest ones (default with --window: 4)")
                    ->transform(integer_in(0, kMaxContextTokens));
  auto* window = cmd->add_option("--window", o->window,
                                 "Slide the cache past the context: the positions it holds (default: -c)")
                     ->transform(token_count_in(1, kMaxContextTokens));
  cmd->add_flag("--stream", o->stream_alias, "Old spelling of --sinks 4 (warns)")->group("");
  cmd->add_option("--save-session", o->save_session,
                  "After generating, save the cache, its tokens included, to this file (atomically; a regular file "
                  "or a new one)")
      ->check(output_file("session file"));
  cmd->add_option("--load-session", o->load_session,
                  "Continue a saved session: -p (optional) is appended after its tokens, as raw text")
      ->check(nonempty_path());
  add_constraint_options(cmd, o->constraint);
  cmd->callback([o, prompt, file, par, beam, lp, sinks, window, logprobs] {
    o->given = {prompt->count() > 0, file->count() > 0,   par->count() > 0,     beam->count() > 0,
                lp->count() > 0,     sinks->count() > 0,  window->count() > 0, logprobs->count() > 0};
    o->validate();
    execute(*o);
  });
}

}  // namespace tally::cli
