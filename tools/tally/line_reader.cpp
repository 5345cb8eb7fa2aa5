#include "line_reader.h"

#include <fmt/format.h>
#include <histedit.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/atomic_file.h"

namespace tally::cli {
namespace {

// How many lines the history file keeps.
constexpr int kHistoryLines = 1000;

class EditorReader final : public LineReader {
 public:
  EditorReader(size_t max_bytes, std::string history_file) : max_bytes_(max_bytes), file_(std::move(history_file)) {
    el_ = el_init("tally", stdin, stdout, stderr);
    if (el_ == nullptr) fail("cannot set up line editing on this terminal");
    el_set(el_, EL_CLIENTDATA, this);
    el_set(el_, EL_EDITOR, "emacs");
    el_set(el_, EL_PROMPT, &EditorReader::prompt_of);
    // Ctrl-C is a key while a line is edited (no SIGINT): it drops the line or, at an empty one, leaves.
    el_set(el_, EL_SETTY, "-d", "-isig", nullptr);
    el_set(el_, EL_ADDFN, "tally-interrupt", "Drop the line, or leave at an empty one", &EditorReader::on_ctrl_c);
    el_set(el_, EL_BIND, "^C", "tally-interrupt", nullptr);
    hist_ = history_init();
    HistEvent ev;
    history(hist_, &ev, H_SETSIZE, kHistoryLines);
    history(hist_, &ev, H_SETUNIQUE, 1);
    if (!file_.empty()) history(hist_, &ev, H_LOAD, file_.c_str());  // none yet is fine
    el_set(el_, EL_HIST, history, hist_);
  }
  ~EditorReader() override {
    el_end(el_);
    history_end(hist_);
  }

  InputLine read(const char* prompt) override {
    prompt_ = prompt;
    ctrl_c_ = CtrlC::None;
    int n = 0;
    const char* s = el_gets(el_, &n);
    InputLine l;
    if (ctrl_c_ != CtrlC::None) {
      fmt::print("^C\n");
      std::fflush(stdout);
      l.kind = ctrl_c_ == CtrlC::Drop ? InputLine::Kind::Dropped : InputLine::Kind::Interrupt;
      return l;
    }
    if (s == nullptr || n <= 0) return l;  // End
    l.text.assign(s, static_cast<size_t>(n));
    while (!l.text.empty() && (l.text.back() == '\n' || l.text.back() == '\r')) l.text.pop_back();
    l.kind = l.text.size() > max_bytes_ ? InputLine::Kind::TooLong : InputLine::Kind::Text;
    if (l.kind == InputLine::Kind::TooLong) l.text.clear();
    return l;
  }

  void remember(const std::string& line) override {
    if (line.empty() || line.size() > 64 * 1024) return;  // a pasted book is not worth recalling
    HistEvent ev;
    history(hist_, &ev, H_ENTER, line.c_str());
    if (file_.empty() || save_failed_) return;
    // Through the one writer of files (a temporary file renamed over the old
    // one): libedit writes to an anonymous file (it cannot write to memory),
    // whose bytes are then saved.
    try {
      std::unique_ptr<FILE, int (*)(FILE*)> tmp(std::tmpfile(), &std::fclose);
      if (!tmp) fail("cannot create a temporary file: {}", std::strerror(errno));
      if (history(hist_, &ev, H_SAVE_FP, tmp.get()) < 0 || std::fflush(tmp.get()) != 0)
        fail("libedit cannot write it: {}", ev.str != nullptr ? ev.str : "unknown error");
      std::string bytes;
      std::rewind(tmp.get());
      char chunk[65536];
      for (size_t n; (n = std::fread(chunk, 1, sizeof chunk, tmp.get())) > 0;) bytes.append(chunk, n);
      std::filesystem::create_directories(std::filesystem::path(file_).parent_path());
      AtomicFile f(file_, "chat history");
      f.write(bytes.data(), bytes.size());
      f.commit();
    } catch (const std::exception& e) {  // tally::Error or a filesystem error: say it once, go on without
      save_failed_ = true;
      fmt::print(stderr, "tally: warning: the chat history is not saved to {}: {}\n", file_, e.what());
    }
  }

  bool interactive() const override { return true; }

 private:
  enum class CtrlC { None, Drop, Leave };

  static char* prompt_of(EditLine* el) {
    void* self = nullptr;
    el_get(el, EL_CLIENTDATA, &self);
    return const_cast<char*>(static_cast<EditorReader*>(self)->prompt_);
  }

  static unsigned char on_ctrl_c(EditLine* el, int) {
    void* self = nullptr;
    el_get(el, EL_CLIENTDATA, &self);
    const LineInfo* li = el_line(el);
    const bool empty = li->lastchar == li->buffer;
    static_cast<EditorReader*>(self)->ctrl_c_ = empty ? CtrlC::Leave : CtrlC::Drop;
    return empty ? CC_EOF : CC_NEWLINE;
  }

  size_t max_bytes_;
  std::string file_;
  EditLine* el_ = nullptr;
  History* hist_ = nullptr;
  const char* prompt_ = "> ";
  CtrlC ctrl_c_ = CtrlC::None;
  bool save_failed_ = false;
};

// Lines from a pipe or a file; the prompt only when stdin is a terminal.
class StreamReader final : public LineReader {
 public:
  explicit StreamReader(size_t max_bytes) : max_bytes_(max_bytes), show_prompt_(isatty(STDIN_FILENO) != 0) {}

  InputLine read(const char* prompt) override {
    if (show_prompt_) {
      fmt::print("{}", prompt);
      std::fflush(stdout);
    }
    InputLine l;
    for (;;) {
      const size_t nl = buf_.find('\n', scanned_);
      if (nl != std::string::npos) {
        l.kind = InputLine::Kind::Text;
        l.text = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        scanned_ = 0;
        if (!l.text.empty() && l.text.back() == '\r') l.text.pop_back();
        if (l.text.size() > max_bytes_) return too_long();
        return l;
      }
      scanned_ = buf_.size();
      if (buf_.size() > max_bytes_ + 1) return too_long();
      if (eof_) {
        if (buf_.empty()) return l;  // End
        l.kind = InputLine::Kind::Text;  // a last line without a newline
        l.text = std::move(buf_);
        buf_.clear();
        scanned_ = 0;
        return l;
      }
      char chunk[65536];
      const ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) {
        l.kind = InputLine::Kind::Interrupt;
        return l;
      }
      if (n < 0) fail("cannot read standard input: {}", std::strerror(errno));
      if (n == 0) eof_ = true;
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }

  void remember(const std::string&) override {}
  bool interactive() const override { return false; }

 private:
  InputLine too_long() {
    buf_.clear();
    scanned_ = 0;
    InputLine l;
    l.kind = InputLine::Kind::TooLong;
    return l;
  }

  size_t max_bytes_;
  bool show_prompt_;
  std::string buf_;
  size_t scanned_ = 0;  // bytes of buf_ already searched for a newline
  bool eof_ = false;
};

}  // namespace

std::unique_ptr<LineReader> LineReader::open(size_t max_bytes, const std::string& history_file) {
  if (isatty(STDIN_FILENO) && isatty(STDOUT_FILENO)) return std::make_unique<EditorReader>(max_bytes, history_file);
  return std::make_unique<StreamReader>(max_bytes);
}

}  // namespace tally::cli
