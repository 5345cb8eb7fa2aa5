// tally serve: an OpenAI-compatible HTTP server with continuous batching over
// one shared KV pool (src/server/). SIGTERM or SIGINT drains: new requests get
// 503, running ones finish (at most --drain-seconds), then it exits 0.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <optional>
#include <thread>

#include "commands.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/printable.h"
#include "io/text_file.h"
#include "kv/kv_cache.h"
#include "kv/kv_disk.h"
#include "model_options.h"
#include "option_checks.h"
#include "server/api_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "speculation_options.h"
#include "usage.h"

namespace tally::cli {

namespace {

// A chat prompt and a reply need room: below this, every request would be refused.
constexpr int64_t kMinServeContext = 64;

// The key is sent as "Authorization: Bearer KEY": printable ASCII without spaces.
std::string api_key_error(const std::string& key) {
  if (key.empty()) return "the key is empty: an empty key would turn authentication off (leave out --api-key instead)";
  for (unsigned char c : key)
    if (c <= 0x20 || c >= 0x7f) return "the key must be printable ASCII without spaces (it travels in an HTTP header)";
  return "";
}

CLI::Validator api_key_text() {
  return CLI::Validator([](std::string& s) { return api_key_error(s); }, "");
}

CLI::Validator nonempty_host() {
  return CLI::Validator(
      [](std::string& s) { return s.empty() ? std::string("the address is empty (e.g. 127.0.0.1, 0.0.0.0, ::1)") : ""; },
      "");
}

// The key is the file's first line (a trailing CR and spaces dropped); bounded
// and refused when empty, so that a wrong file never opens the server.
std::string read_api_key_file(const std::string& path) {
  std::string text = read_text_file(path, "API key file", 64 << 10);
  std::string key = text.substr(0, text.find('\n'));
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
  if (const std::string e = api_key_error(key); !e.empty()) fail("--api-key-file {}: {}", path, e);
  return key;
}

// An IPv6 address goes in brackets in a URL.
std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

}  // namespace

void add_serve(CLI::App& app) {
  struct Opts {
    ModelOptions m;
    server::ServerOptions s;
    server::SchedulerLimits limits;
    std::string api_key_file;
    std::string max_body = "4MiB";
    std::string alias;
    int drain_seconds = 30;
    std::string speculate;  // empty: "draft" with --draft, else "off"
    std::string draft;
    int64_t draft_vocab = -1;  // -1: not given
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching (GET / for a web page)");
  add_model_options(cmd, o->m, kRunning | kPrefixCache | kDiskCache,
                    "KV pool size in positions, shared by the sequences, e.g. 16k (default: the larger of 8192 and "
                    "--parallel x 2048)");
  cmd->add_option("-a,--alias", o->alias,
                  "The model's id in the API (/v1/models, \"model\" in replies) (default: its catalog name, or the "
                  "file name without .gguf)")
      ->check(nonempty_text("--alias"));
  cmd->add_option("--host", o->s.http.host, "Address to listen on")->capture_default_str()->check(nonempty_host());
  cmd->add_option("--port", o->s.http.port, "Port (0: any free port, printed at start)")
      ->capture_default_str()
      ->transform(integer_in(0, 65535));
  // At most 8192: the default pool of 2048 positions per sequence stays within the context limit.
  cmd->add_option("--parallel", o->limits.max_sequences, "Sequences generated at once")
      ->capture_default_str()
      ->transform(integer_in(1, kMaxContextTokens / 2048));
  cmd->add_option("--queue", o->limits.max_queue, "Requests that may wait for admission (beyond: 429)")
      ->capture_default_str()
      ->transform(integer_in(1, 1 << 20));
  cmd->add_option("--max-tokens", o->limits.max_tokens, "Cap on a request's max_tokens")
      ->capture_default_str()
      ->transform(integer_in(1, kMaxContextTokens));
  auto* key = cmd->add_option("--api-key", o->s.api_key, "Require 'Authorization: Bearer KEY'")->check(api_key_text());
  cmd->add_option("--api-key-file", o->api_key_file, "Read the API key from the first line of a file")
      ->excludes(key)
      ->check(nonempty_path());
  cmd->add_option("--max-body", o->max_body, "Largest request body (beyond: 413), e.g. 4MiB")
      ->capture_default_str()
      ->check(byte_count_in("--max-body", 1, uint64_t{1} << 30));
  cmd->add_option("--read-timeout", o->s.http.read_timeout_s,
                  "Seconds a request's head may take to arrive, and then its body (beyond: 408)")
      ->capture_default_str()
      ->transform(integer_in(1, 3600));
  cmd->add_option("--idle-timeout", o->s.http.idle_timeout_s, "Seconds a kept-alive connection waits for a request")
      ->capture_default_str()
      ->transform(integer_in(1, 3600));
  cmd->add_option("--max-connections", o->s.http.max_connections, "Connections served at once (beyond: 503)")
      ->capture_default_str()
      ->transform(integer_in(1, 65536));
  cmd->add_option("--max-connections-per-client", o->s.http.max_connections_per_client,
                  "Connections one client address may hold at once (beyond: 503; 0: no cap, the default, as behind a proxy every client has its address)")
      ->capture_default_str()
      ->transform(integer_in(0, 65536));
  cmd->add_option("--sinks", o->limits.sinks,
                  "Slide a reply's window past the context (StreamingLLM) keeping the first N tokens: only "
                  "--max-tokens/max_tokens ends a reply (default: off, a full context ends it)")
      ->transform(integer_in(0, kMaxContextTokens));
  cmd->add_option("--speculate", o->speculate,
                  "Speculative decoding for requests that do not say ('speculate' in a request overrides it): "
                  "'lookup' (prompt lookup), 'draft' (the model of --draft guesses) or 'off' (the default, or 'draft' "
                  "with --draft). A step takes guesses only while they raise its expected tokens per second, so a "
                  "step full of sequences takes few")
      ->check(CLI::IsMember({"lookup", "draft", "off"}));
  cmd->add_option("--draft", o->draft,
                  "A draft model requests may speculate with ('speculate': 'draft'): a name or a path, with the "
                  "model's vocabulary (e.g. qwen2.5-coder:0.5b for qwen2.5-coder:1.5b); its cache has the pool's size "
                  "and cache type, within what the model's cache leaves of --kv-budget");
  cmd->add_option("--draft-max", o->limits.draft_max,
                  "The most guesses a step verifies for one sequence (a request's 'draft_max' may ask for fewer)")
      ->capture_default_str()
      ->transform(integer_in(1, 64));
  add_draft_vocab_option(cmd, o->draft_vocab);
  cmd->add_option("--drain-seconds", o->drain_seconds, "On SIGTERM, how long running requests may finish")
      ->capture_default_str()
      ->transform(integer_in(0, 86400));
  cmd->callback([o] {
    o->m.validate();
    if (o->m.ctx != 0 && o->m.ctx < kMinServeContext)
      usage_fail("-c {} leaves no room for a chat prompt and a reply: serve needs at least {} positions", o->m.ctx,
           kMinServeContext);
    o->s.http.limits.max_body_bytes = parse_byte_count(o->max_body, "--max-body");
    const std::string spec = !o->speculate.empty() ? o->speculate : o->draft.empty() ? "off" : "draft";
    o->limits.speculate = spec == "lookup" ? server::Speculation::Lookup
                          : spec == "draft" ? server::Speculation::Draft
                                            : server::Speculation::Off;
    if (spec != "off" && o->limits.sinks >= 0)
      usage_fail("--speculate {} rolls back a reply's cache: not with a sliding window (--sinks)", spec);
    if (spec == "draft" && o->draft.empty()) usage_fail("--speculate draft needs the draft model: give --draft NAME|PATH");
    if (!o->draft.empty() && o->limits.sinks >= 0)
      usage_fail("--draft speculates, which rolls back a reply's cache: not with a sliding window (--sinks)");
    o->limits.draft_vocab = draft_vocab(o->draft_vocab, !o->draft.empty());
    if (!o->api_key_file.empty()) o->s.api_key = read_api_key_file(o->api_key_file);
    // Signals are taken by one thread (below); every other thread starts with them blocked.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    LoadedModel lm = load_model(o->m);
    EngineOptions eo = engine_options(o->m, *lm.model);
    if (o->m.ctx == 0) eo.n_ctx = std::max<int64_t>(8192, o->limits.max_sequences * 2048);
    eo.max_sequences = o->limits.max_sequences;
    std::optional<LoadedModel> draft;
    if (!o->draft.empty()) draft.emplace(load_draft(o->m, o->draft, lm));
    server::Metrics metrics;
    server::Scheduler scheduler(*lm.model, *lm.tokenizer, eo, o->limits, metrics, draft ? draft->model.get() : nullptr);
    o->s.model_name = o->alias.empty() ? lm.name : o->alias;
    server::ApiServer api(*lm.model, *lm.tokenizer, scheduler, metrics, o->s);
    std::string error;
    if (!api.bind(&error)) fail("{}", error);
    fmt::print(stderr, "tally serve: {} on http://{}:{}/ ({} sequences at once, context {}, KV pool of {} positions{})\n",
               o->s.model_name, url_host(o->s.http.host), api.port(), o->limits.max_sequences, scheduler.n_ctx(), eo.n_ctx,
               o->s.api_key.empty() ? "" : ", API key required");
    if (draft)
      fmt::print(stderr, "tally serve: draft model {} ({}), speculation by default: {}\n", draft->name,
                 format_bytes_short(draft->model->weight_bytes()), server::speculation_name(o->limits.speculate));
    if (!eo.disk.dir.empty()) {
      const KvDiskUsage u = KvDisk::usage(eo.disk.dir);
      fmt::print(stderr, "tally serve: prefix cache folder {}: {} block files, {} (budget {})\n", printable(eo.disk.dir),
                 u.files, format_bytes_short(u.bytes),
                 format_bytes_short(eo.disk.budget_bytes ? eo.disk.budget_bytes : kDefaultDiskBudget));
    }
    std::fflush(stderr);

    std::atomic<bool> signalled{false};
    std::thread signals([&] {
      int sig = 0;
      sigwait(&sigs, &sig);
      signalled = true;
      // Refuse new requests before saying so: a client that reads the line may send one at once.
      scheduler.begin_drain();
      fmt::print(stderr, "tally serve: {} received: draining (at most {} s)\n", sig == SIGTERM ? "SIGTERM" : "SIGINT",
                 o->drain_seconds);
      if (!scheduler.wait_idle(std::chrono::seconds(o->drain_seconds))) {
        fmt::print(stderr, "tally serve: drain time is up: cancelling what still runs\n");
        scheduler.cancel_all();
        scheduler.wait_idle(std::chrono::seconds(5));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the streams' last events and [DONE]
      api.stop();
    });
    api.serve();
    // serve() also returns when the listening socket fails: wake the signal thread then
    // (SIGTERM is blocked everywhere else, so it goes to the thread in sigwait).
    if (!signalled) kill(getpid(), SIGTERM);
    signals.join();
    fmt::print(stderr, "tally serve: stopped\n");
  });
}

}  // namespace tally::cli
