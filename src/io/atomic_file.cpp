#include "io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/file_kind.h"

namespace tally {

namespace {

constexpr int kMaxLinks = 40;  // as the kernel's ELOOP limit

std::string folder_of(const std::string& target) {
  const std::filesystem::path p(target);
  return p.has_parent_path() ? p.parent_path().string() : ".";
}

// ".NAME.tmp-": the prefix of every temporary name for `target`.
std::string temp_prefix(const std::string& target) {
  std::string prefix(".");
  prefix.append(std::filesystem::path(target).filename().string()).append(".tmp-");
  return prefix;
}

}  // namespace

std::string resolve_write_target(const std::string& path, std::string_view what) {
  if (path.empty()) fail("the {} path is empty", what);
  std::filesystem::path p(path);
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno != ENOENT) fail("{}: cannot write the {} there: {}", path, what, std::strerror(errno));
      // A new file: its folder must be there.
      const std::string dir = folder_of(p.string());
      struct stat ds {};
      if (::stat(dir.c_str(), &ds) != 0) fail("{}: cannot write the {} there: folder {}: {}", path, what, dir, std::strerror(errno));
      if (!S_ISDIR(ds.st_mode)) fail("{}: cannot write the {} there: {} is not a folder", path, what, dir);
      return p.string();
    }
    if (S_ISREG(st.st_mode)) return p.string();
    if (!S_ISLNK(st.st_mode))
      fail("{}: cannot write the {} there: it is {}, not a regular file", path, what, file_kind(st.st_mode));
    if (hops == kMaxLinks)
      fail("{}: cannot write the {} there: more than {} symbolic links in a row", path, what, kMaxLinks);
    std::string link(static_cast<size_t>(st.st_size > 0 ? st.st_size : 4096), '\0');
    const ssize_t n = ::readlink(p.c_str(), link.data(), link.size());
    if (n < 0) fail("{}: cannot read the symbolic link: {}", path, std::strerror(errno));
    link.resize(static_cast<size_t>(n));
    const std::filesystem::path next(link);
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
}

int remove_stale_temporaries(const std::string& target) {
  const std::string dir = folder_of(target), prefix = temp_prefix(target);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  int removed = 0;
  const bool any = std::filesystem::path(target).filename().empty();
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    size_t at = prefix.size();
    if (any) {  // ".ANY.tmp-"
      at = name.rfind(".tmp-");
      if (name.empty() || name[0] != '.' || at == std::string_view::npos || at == 0) continue;
      at += 5;
    } else if (name.substr(0, prefix.size()) != prefix) {
      continue;
    }
    // ".NAME.tmp-PID-XXXXXX": the writer's process id, then mkstemp's six characters.
    const std::string rest(name.substr(at));
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (end == rest.c_str() || *end != '-' || std::strlen(end) != 7 || pid <= 0) continue;
    if (pid == ::getpid()) continue;  // another AtomicFile of this process: still open
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours to judge
    if (::unlinkat(::dirfd(d), e->d_name, 0) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

AtomicFile::AtomicFile(const std::string& path, std::string_view what, bool sweep)
    : path_(path), what_(what), target_(resolve_write_target(path, what)) {
  const std::string dir = folder_of(target_);
  if (sweep) remove_stale_temporaries(target_);
  std::string name = (std::filesystem::path(dir) / temp_prefix(target_)).string();
  name.append(std::to_string(::getpid())).append("-XXXXXX");
  fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot create the {} in {}: {}", path_, what_, dir, std::strerror(errno));
  temp_ = name;
  // The permissions the replaced file had, or those a plain create would give.
  struct stat st {};
  mode_t mode;
  if (::stat(target_.c_str(), &st) == 0) {
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  ::fchmod(fd_, mode);
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void AtomicFile::write(const void* p, size_t n) {
  if (fd_ < 0) fail("{}: the {} is already closed", path_, what_);
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd_, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      discard();
      fail("{}: cannot write the {} (after {} bytes): {}", path_, what_, written_, std::strerror(err));
    }
    b += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
}

void AtomicFile::commit() {
  if (fd_ < 0) fail("{}: the {} is already closed", path_, what_);
  auto fail_with = [this](const char* step, int err) {
    discard();
    fail("{}: cannot {} the {}: {}", path_, step, what_, std::strerror(err));
  };
  if (::fsync(fd_) != 0) fail_with("flush", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_with("close", errno);
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail_with("replace the old file with", errno);
  temp_.clear();
  // The rename reaches the disk with the folder's entry.
  const int dfd = ::open(folder_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomically(const std::string& path, std::string_view what, std::string_view bytes) {
  AtomicFile f(path, what);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

}  // namespace tally
