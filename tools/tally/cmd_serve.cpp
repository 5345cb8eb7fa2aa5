// tally serve: an OpenAI-compatible HTTP server with continuous batching over
// one shared KV pool (src/server/). SIGTERM or SIGINT drains: new requests get
// 503, running ones finish (at most --drain-seconds), then it exits 0.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <thread>

#include "commands.h"
#include "core/error.h"
#include "kv/kv_cache.h"
#include "model_options.h"
#include "option_checks.h"
#include "server/api_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"

namespace tally::cli {

void add_serve(CLI::App& app) {
  struct Opts {
    ModelOptions m;
    server::ServerOptions s;
    server::SchedulerLimits limits;
    std::string api_key_file;
    int drain_seconds = 30;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching (GET / for a web page)");
  add_model_options(cmd, o->m);
  cmd->add_option("--host", o->s.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->s.port, "Port (0: any free port, printed at start)")->capture_default_str();
  // At most 8192: the default pool of 2048 positions per sequence stays within the context limit.
  cmd->add_option("--parallel", o->limits.max_sequences, "Sequences generated at once")
      ->capture_default_str()
      ->transform(integer_in(1, kMaxContextTokens / 2048));
  cmd->add_option("--queue", o->limits.max_queue, "Requests that may wait for admission (beyond: 429)")
      ->capture_default_str();
  cmd->add_option("--max-tokens", o->limits.max_tokens, "Cap on a request's max_tokens")->capture_default_str();
  auto* key = cmd->add_option("--api-key", o->s.api_key, "Require 'Authorization: Bearer KEY'");
  cmd->add_option("--api-key-file", o->api_key_file, "Read the API key from the first line of a file")->excludes(key);
  cmd->add_option("--max-body", o->s.max_body_bytes, "Largest request body in bytes (beyond: 413)")->capture_default_str();
  cmd->add_option("--drain-seconds", o->drain_seconds, "On SIGTERM, how long running requests may finish")
      ->capture_default_str();
  cmd->callback([o] {
    if (o->s.port < 0 || o->s.port > 65535) fail("--port must be in [0, 65535], got {}", o->s.port);
    if (o->drain_seconds < 0) fail("--drain-seconds must be >= 0, got {}", o->drain_seconds);
    // Checked again by the Scheduler; here, before the model loads.
    if (o->limits.max_sequences < 1) fail("--parallel must be at least 1, got {}", o->limits.max_sequences);
    if (o->limits.max_queue < 1) fail("--queue must be at least 1, got {}", o->limits.max_queue);
    if (o->limits.max_tokens < 1) fail("--max-tokens must be at least 1, got {}", o->limits.max_tokens);
    if (!o->api_key_file.empty()) {
      std::ifstream in(o->api_key_file);
      if (!in) fail("--api-key-file {}: cannot open it", o->api_key_file);
      std::getline(in, o->s.api_key);
      while (!o->s.api_key.empty() && (o->s.api_key.back() == '\r' || o->s.api_key.back() == ' '))
        o->s.api_key.pop_back();
      if (o->s.api_key.empty()) fail("--api-key-file {}: the first line is empty", o->api_key_file);
    }
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
    server::Metrics metrics;
    server::Scheduler scheduler(*lm.model, *lm.tokenizer, eo, o->limits, metrics);
    o->s.model_name = lm.model->file().get_string("general.name", "tally-model");
    o->s.n_threads = o->m.threads;
    server::ApiServer api(*lm.model, *lm.tokenizer, scheduler, metrics, o->s);
    std::string error;
    if (!api.bind(&error)) fail("{}", error);
    fmt::print(stderr, "tally serve: {} on http://{}:{}/ ({} sequences at once, context {}, KV pool of {} positions{})\n",
               o->s.model_name, o->s.host, api.port(), o->limits.max_sequences, scheduler.n_ctx(), eo.n_ctx,
               o->s.api_key.empty() ? "" : ", API key required");
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
