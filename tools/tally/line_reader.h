#pragma once
// The chat's input, a line at a time. When stdin and stdout are terminals:
// line editing (arrows, Home/End, Ctrl-A/E/K/W, ...) and a history kept in
// a file (Up/Down, Ctrl-R), through Debian's libedit; Ctrl-C is read as a
// key (the terminal's ISIG is off while a line is edited), so it can mean
// "drop this line" or, at an empty prompt, "leave". Otherwise: lines read
// from the pipe or file, with no echo and no history.
//
// Invariant: a Text line never holds a newline and is never longer than
// max_bytes; a longer one is TooLong (the piped reader cannot skip to the
// next newline safely: /dev/zero has none).
#include <cstddef>
#include <memory>
#include <string>

namespace tally::cli {

struct InputLine {
  enum class Kind {
    Text,
    Dropped,    // Ctrl-C with text on the line: the line is dropped
    Interrupt,  // Ctrl-C at an empty line (or SIGINT while a pipe was read)
    End,        // Ctrl-D at an empty line, or the end of the input
    TooLong,    // more than max_bytes before a newline
  };
  Kind kind = Kind::End;
  std::string text;
};

class LineReader {
 public:
  virtual ~LineReader() = default;
  // `history_file`: where the editor keeps its history ("" : none).
  static std::unique_ptr<LineReader> open(size_t max_bytes, const std::string& history_file);

  virtual InputLine read(const char* prompt) = 0;
  // Adds a line the user sent to the history (and saves it).
  virtual void remember(const std::string& line) = 0;
  // Line editing on a terminal.
  virtual bool interactive() const = 0;
};

}  // namespace tally::cli
