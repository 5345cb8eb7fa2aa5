// tally chat: an interactive multi-turn conversation (runtime/conversation.h):
// each turn prefills only the tokens the cache does not already hold; when
// the context fills up, the oldest turns are dropped and the chat goes on.
// The input (line_reader.h) is edited with a history on a terminal; what a
// line means is chat_input.h's; Ctrl-C stops a reply (GenerateOptions::cancel).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <memory>

#include "chat_input.h"
#include "commands.h"
#include "constraint_options.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "encode_input.h"
#include "io/model_locator.h"
#include "kv/kv_disk.h"
#include "line_reader.h"
#include "model_options.h"
#include "option_checks.h"
#include "output.h"
#include "runtime/conversation.h"
#include "sampling_options.h"
#include "speculation_options.h"
#include "tokenizer/chat_template.h"
#include "usage.h"

namespace tally::cli {

namespace {

// The most one message may hold: a paste of a long file fits; a stream
// without newlines (< /dev/zero) is stopped here instead of filling memory.
constexpr size_t kMaxMessageBytes = size_t{1} << 20;

// Ctrl-C after a line was sent stops its reply (as soon as the reply has a
// token: a prefill is not cut); a second one before the reply has stopped (a
// long prefill) leaves at once. At the prompt the line editor reads Ctrl-C as
// a key (line_reader.h); a SIGINT there comes in the instant before it takes
// the terminal, when the line is still empty, or from a pipe's reader: both
// mean "leave", as Ctrl-C at an empty prompt does.
std::atomic<bool> g_cancel{false};
volatile sig_atomic_t g_at_prompt = 0;

void on_sigint(int) {
  const char nl = '\n';
  if (g_at_prompt) {
    (void)!::write(STDOUT_FILENO, &nl, 1);
    _exit(0);
  }
  if (g_cancel.exchange(true)) {
    (void)!::write(STDERR_FILENO, &nl, 1);
    _exit(130);
  }
}

struct ChatOptions {
  ModelOptions m;
  SamplingOptions sampling;
  SpeculationOptions speculation;
  ConstraintOptions constraint;  // every reply
  std::string system;
  int64_t n_predict = 512;

  void validate() const {
    m.validate();
    sampling.validate();
    speculation.validate();
    constraint.validate();
  }
};

// What the chat changes as it goes, and shows in /stats.
struct ChatState {
  GenerateOptions g;
  uint64_t seed = 0;
  TurnResult last;
  bool replied = false;
  bool told_disk_errors = false;  // the disk tier's first failed write was reported
};

double tps(double n, double ms) { return ms > 0 ? n * 1000.0 / ms : 0.0; }

void print_banner(const LoadedModel& lm, const Session& s, const ChatOptions& o, uint64_t seed) {
  fmt::print("tally chat: {}, context {} tokens, {} KV cache, seed {}\n", lm.name, s.n_ctx(), o.m.cache_type, seed);
  fmt::print("/help for commands, \"\"\" for a message of several lines; Ctrl-C stops a reply; Ctrl-D or /bye leaves\n");
  std::fflush(stdout);
}

void print_settings(const ChatState& st) {
  const SamplerParams& p = st.g.sampling;
  fmt::print("temp {:g}, top_p {:g}, top_k {}, min_p {:g}, seed {}, max_tokens {}\n", p.temperature, p.top_p, p.top_k,
             p.min_p, p.seed, st.g.max_tokens);
}

void apply_setting(ChatState& st, ChatSetting s, double v) {
  SamplerParams& p = st.g.sampling;
  switch (s) {
    case ChatSetting::Temperature: p.temperature = static_cast<float>(v); break;
    case ChatSetting::TopP: p.top_p = static_cast<float>(v); break;
    case ChatSetting::TopK: p.top_k = static_cast<int32_t>(v); break;
    case ChatSetting::MinP: p.min_p = static_cast<float>(v); break;
    case ChatSetting::Seed: p.seed = v < 0 ? random_seed() : static_cast<uint64_t>(v); break;
    case ChatSetting::MaxTokens: st.g.max_tokens = static_cast<int64_t>(v); break;
    case ChatSetting::None: break;
  }
}

void print_stats(const Session& s, const Conversation& chat, const ChatState& st) {
  size_t turns = 0;
  for (const ChatMessage& m : chat.messages()) turns += m.role == "user" ? 1 : 0;
  fmt::print("context: {} of {} tokens in the cache, {} turn(s); KV cache {}\n", s.length(), s.n_ctx(), turns,
             format_bytes_short(s.cache().storage().bytes()));
  if (st.replied) {
    const GenerateResult& g = st.last.generation;
    fmt::print("last reply: {} prompt tokens prefilled at {:.1f} tok/s, {} reused from the cache; {} generated at "
               "{:.1f} tok/s\n",
               st.last.prefilled, tps(static_cast<double>(st.last.prefilled), g.prefill_ms), st.last.reused,
               g.tokens.size(), tps(static_cast<double>(g.decoded_tokens()), g.decode_ms));
    if (g.drafted > 0)
      fmt::print("speculation: {} of {} guesses kept, {} target steps\n", g.accepted, g.drafted, g.decode_steps);
  }
  print_settings(st);
}

// One reply: streamed to stdout, with its notes and speed on stderr.
void reply(Conversation& chat, const Session& session, ChatState& st, const std::string& text) {
  TurnResult r;
  try {
    r = chat.say(text, st.g, [](const std::string& piece) {
      fmt::print("{}", piece);
      std::fflush(stdout);
    });
  } catch (const Error& e) {  // this turn is refused; the conversation goes on
    fmt::print(stderr, "tally: {}\n", e.what());
    return;
  }
  fmt::print("\n");
  flush_stdout();
  st.last = r;
  st.replied = true;
  const Finish f = r.generation.stop;
  if (f == Finish::Cancelled)
    fmt::print(stderr, "[stopped (Ctrl-C): the reply so far stays in the conversation, marked stopped]\n");
  if (r.dropped_turns > 0)
    fmt::print(stderr, "[the context of {} tokens was full: the oldest {} turn(s) were dropped]\n", session.n_ctx(),
               r.dropped_turns);
  if (f == Finish::ContextFull)
    fmt::print(stderr, "[reply cut: the context of {} tokens is full; the next turn drops the oldest turns]\n",
               session.n_ctx());
  if (f == Finish::MaxTokens)
    fmt::print(stderr, "[reply cut at {} tokens, the most a reply may have (-n, or /set max_tokens N)]\n",
               r.generation.tokens.size());
  const GenerateResult& g = r.generation;
  fmt::print(stderr, "[{} new prompt tokens prefilled, {} reused from the cache{}, {} generated, {:.1f} tok/s{}]\n",
             r.prefilled, r.reused, r.from_disk > 0 ? fmt::format(" ({} from disk)", r.from_disk) : std::string(),
             g.tokens.size(), tps(static_cast<double>(g.decoded_tokens()), g.decode_ms),
             g.drafted > 0 ? fmt::format("; {} of {} guesses kept", g.accepted, g.drafted) : std::string());
  const KvDiskStats disk = session.cache().stats().disk;
  if (disk.write_errors > 0 && !st.told_disk_errors) {
    fmt::print(stderr, "tally: warning: {}\n", describe_write_errors(disk));
    st.told_disk_errors = true;
  }
}

void save_or_load(bool save, const std::string& file, Conversation& chat, const Session& session) {
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
}

// Runs one command; false: leave the chat.
bool run_command(const ChatAction& a, Conversation& chat, const Session& session, ChatState& st) {
  switch (a.command) {
    case ChatCommand::Help: fmt::print("{}\n", ChatInput::help()); break;
    case ChatCommand::Bye: return false;
    case ChatCommand::Clear:
      chat.clear();
      fmt::print(stderr, "[the conversation is cleared; the system message stays]\n");
      break;
    case ChatCommand::System:
      if (a.text.empty()) {
        const auto& ms = chat.messages();
        const bool has = !ms.empty() && ms.front().role == "system";
        fmt::print("{}\n", has ? ms.front().content : "(none given: the chat template's default applies)");
      } else {
        chat.set_system(a.text);
        fmt::print(stderr, "[the system message is set; the next reply follows it]\n");
      }
      break;
    case ChatCommand::Set:
      if (a.setting == ChatSetting::None) {
        print_settings(st);
      } else {
        apply_setting(st, a.setting, a.value);
        print_settings(st);
      }
      break;
    case ChatCommand::Save: save_or_load(true, a.text, chat, session); break;
    case ChatCommand::Load: save_or_load(false, a.text, chat, session); break;
    case ChatCommand::Stats: print_stats(session, chat, st); break;
  }
  flush_stdout();
  return true;
}

void execute(const ChatOptions& o) {
  LoadedModel lm = load_model(o.m);
  const Tokenizer& tok = *lm.tokenizer;
  const ChatTemplate tmpl = chat_template_of(*lm.model);
  if (tmpl.is_fallback()) warn_not_instruct(lm.name);
  SessionOptions so = session_options(o.m, *lm.model, false);
  o.speculation.apply(so);
  const std::unique_ptr<Session> owned = open_session(*lm.model, so);
  Session& session = *owned;
  o.speculation.check_context(session.n_ctx());
  Conversation chat(session, tok, tmpl, o.system);

  ChatState st;
  st.g.max_tokens = o.n_predict;
  st.g.sampling = o.sampling.resolve();
  st.g.is_stop = [&tok](int32_t id) { return tok.is_end_of_generation(id); };
  st.g.cancel = &g_cancel;
  st.g.constraint = o.constraint.build(lm);
  o.speculation.apply(st.g);
  const std::unique_ptr<DraftRun> draft = open_draft(o.speculation, o.m, lm, session);
  if (draft) st.g.draft = draft->session.get();

  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a read of a pipe returns at Ctrl-C
  sigaction(SIGINT, &sa, nullptr);

  auto reader = LineReader::open(kMaxMessageBytes, (std::filesystem::path(tally_home()) / "chat_history").string());
  if (reader->interactive()) print_banner(lm, session, o, st.g.sampling.seed);
  ChatInput input(kMaxMessageBytes);
  for (;;) {
    g_at_prompt = !input.in_block();  // in a block, Ctrl-C drops the block (the reader says so)
    const InputLine line = reader->read(input.in_block() ? "... " : "> ");
    g_at_prompt = 0;
    g_cancel = false;  // from here a Ctrl-C is about what this line starts
    using K = InputLine::Kind;
    if (line.kind == K::End) {
      if (reader->interactive()) fmt::print("\n");  // Ctrl-D: the shell's prompt on a line of its own
      break;
    }
    if (line.kind == K::Interrupt) {
      if (!input.in_block()) break;
      input.reset();
      continue;
    }
    if (line.kind == K::Dropped) {
      input.reset();
      continue;
    }
    if (line.kind == K::TooLong) {
      const std::string why = fmt::format("a line is longer than {}, the most one message may hold",
                                          format_bytes_short(kMaxMessageBytes));
      if (!reader->interactive()) fail("standard input: {}; the chat stops", why);
      fmt::print(stderr, "tally: {}; it was not sent\n", why);
      input.reset();
      continue;
    }
    reader->remember(line.text);
    const ChatAction a = input.feed(line.text);
    switch (a.kind) {
      case ChatAction::Kind::Nothing: break;
      case ChatAction::Kind::Refused: fmt::print(stderr, "tally: {}\n", a.text); break;
      case ChatAction::Kind::Message: reply(chat, session, st, a.text); break;
      case ChatAction::Kind::Command:
        if (!run_command(a, chat, session, st)) return;
        break;
    }
  }
}

}  // namespace

void add_chat(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  auto* cmd = app.add_subcommand(
      "chat",
      "Chat with the model in the terminal (/help for commands; Ctrl-C stops a reply; Ctrl-D or /bye leaves)");
  add_model_options(cmd, o->m, kRunning | kDiskCache);
  add_sampling_options(cmd, o->sampling);
  add_speculation_options(cmd, o->speculation);
  add_constraint_options(cmd, o->constraint);
  cmd->add_option("--system,--system-prompt", o->system, "System message (default: the template's own)");
  cmd->add_option("-n,--n-predict", o->n_predict, "Tokens per reply at most (at most half the context)")
      ->capture_default_str()
      ->transform(integer_in(1, kMaxContextTokens));
  cmd->callback([o] {
    o->validate();
    execute(*o);
  });
}

}  // namespace tally::cli
