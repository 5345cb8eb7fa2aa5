#include "io/text_file.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/byte_size.h"
#include "core/error.h"
#include "io/file_kind.h"

namespace tally {

namespace {

struct Fd {
  int fd;
  ~Fd() { ::close(fd); }
};

// A FIFO in the file system, as opposed to a pipe a process made (`<(cmd)`,
// a shell's `|` seen through /dev/stdin), whose writer exists from the start.
bool named_fifo(int fd) {
  struct statfs fs {};
  return ::fstatfs(fd, &fs) == 0 && fs.f_type != PIPEFS_MAGIC;
}

}  // namespace

std::string read_text_file(const std::string& path, std::string_view what, uint64_t max_bytes, InputKind kind) {
  // O_NONBLOCK: a FIFO's open would otherwise wait for a writer, and a
  // device's may wait too, before the checks below could say anything.
  const Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)};
  if (f.fd < 0) fail("{}: cannot open the {}: {}", path, what, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail("{}: cannot stat the {}: {}", path, what, std::strerror(errno));
  const mode_t m = st.st_mode;
  if (S_ISDIR(m)) fail("{}: is a directory, not a {}", path, what);
  if (kind == InputKind::File && !S_ISREG(m))
    fail("{}: not a regular file ({}): a {} must be a regular file", path, file_kind(m), what);
  if (!S_ISREG(m) && !S_ISFIFO(m) && !S_ISCHR(m) && !S_ISSOCK(m))
    fail("{}: is {}, not a regular file, a pipe or a character device, so it is not read as a {}", path, file_kind(m), what);
  if (S_ISREG(m) && static_cast<uint64_t>(st.st_size) > max_bytes)
    fail("{}: the {} has {}, more than the limit of {}", path, what, format_bytes(st.st_size), format_bytes(max_bytes));

  // A FIFO without a writer reads as at its end at once (a blocking open
  // would wait for one instead); one whose writer has not written yet gives
  // EAGAIN. After that first read, data is waited for as `cat` does.
  bool probing = S_ISFIFO(m);
  auto wait_for_data = [&] {
    probing = false;
    if (const int fl = ::fcntl(f.fd, F_GETFL); fl < 0 || ::fcntl(f.fd, F_SETFL, fl & ~O_NONBLOCK) != 0)
      fail("{}: cannot read the {}: {}", path, what, std::strerror(errno));
  };
  if (!probing) wait_for_data();
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN && probing) {
        wait_for_data();
        continue;
      }
      fail("{}: read error in the {} after {} bytes: {}", path, what, text.size(), std::strerror(errno));
    }
    if (n == 0) {
      if (probing && named_fifo(f.fd))
        fail("{}: no process has the FIFO open for writing, so there is no {} to read (start the writer first)",
             path, what);
      break;
    }
    if (text.size() + static_cast<uint64_t>(n) > max_bytes)
      fail("{}: the {} holds more than the limit of {}", path, what, format_bytes(max_bytes));
    text.append(buf, static_cast<size_t>(n));
    if (probing) wait_for_data();
  }
  return text;
}

}  // namespace tally
