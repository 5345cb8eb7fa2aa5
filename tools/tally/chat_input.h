#pragma once
// What a line typed into `tally chat` means: a message for the model, a
// command (/help, /bye, /clear, /system, /set, /save, /load, /stats), or a
// refusal with one line saying why. Lines between two """ lines (or
// """text ... text""") make one message of several lines. Pure: no I/O, so
// that any bytes can be fed to it (tests/fuzz/fuzz_chat_input.cpp).
//
// Invariants:
// - A line that starts with '/' is never sent to the model: it is a command
//   or refused (with a "did you mean"); "//text" sends "/text".
// - A message is never empty or only white space, and never longer than
//   max_message_bytes; a longer one is refused whole, never cut.
// - A refusal is one line of at most 1 KiB, its control characters escaped.
// - /set values are read strictly (core/number_text.h) and are within the
//   setting's range when accepted.
// - Inside a """ block every line is text, commands included.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tally::cli {

enum class ChatCommand { Help, Bye, Clear, System, Set, Save, Load, Stats };

// What /set changes. Seed -1: a random seed for each reply.
enum class ChatSetting { None, Temperature, TopP, TopK, MinP, Seed, MaxTokens };

struct ChatAction {
  enum class Kind {
    Nothing,   // an empty line, or a line inside an unfinished """ block
    Message,   // text: the message
    Command,   // command, with text (/system's message, /save's and /load's path)
    Refused,   // text: why, one line
  };
  Kind kind = Kind::Nothing;
  ChatCommand command = ChatCommand::Help;
  std::string text;
  ChatSetting setting = ChatSetting::None;  // /set: what (None: show the settings)
  double value = 0;                         // /set: the value, within the setting's range
};

class ChatInput {
 public:
  explicit ChatInput(size_t max_message_bytes) : max_bytes_(max_message_bytes) {}

  // One line, without its newline.
  ChatAction feed(std::string_view line);
  // Inside a """ block (the prompt says so).
  bool in_block() const { return in_block_; }
  // Drops a half-typed block (Ctrl-C at the prompt).
  void reset();

  // The commands and what they do, for /help.
  static std::string help();
  // /set's names, ranges and meaning, for /help and errors.
  static std::string settings_help();
  static const char* setting_name(ChatSetting s);

 private:
  ChatAction command(std::string_view line);
  void add_to_block(std::string_view part);
  ChatAction finish_block();
  ChatAction too_long() const;

  size_t max_bytes_;
  bool in_block_ = false;
  bool block_too_long_ = false;
  size_t block_lines_ = 0;
  std::string block_;
};

}  // namespace tally::cli
