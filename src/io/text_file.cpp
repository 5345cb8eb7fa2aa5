#include "io/text_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/byte_size.h"
#include "core/error.h"

namespace tally {

std::string read_text_file(const std::string& path, std::string_view what, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) fail("{}: cannot open the {}: {}", path, what, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("{}: cannot stat the {}: {}", path, what, std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail("{}: is a directory, not a {}", path, what);
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode) && !S_ISSOCK(st.st_mode))
    fail("{}: is not a regular file, a pipe or a character device, so it is not read as a {}", path, what);
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes)
    fail("{}: the {} has {}, more than the limit of {}", path, what, format_bytes(st.st_size), format_bytes(max_bytes));
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("{}: read error in the {} after {} bytes: {}", path, what, text.size(), std::strerror(errno));
    }
    if (n == 0) break;
    if (text.size() + static_cast<uint64_t>(n) > max_bytes)
      fail("{}: the {} holds more than the limit of {}", path, what, format_bytes(max_bytes));
    text.append(buf, static_cast<size_t>(n));
  }
  return text;
}

}  // namespace tally
