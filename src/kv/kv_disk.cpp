#include "kv/kv_disk.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/sha256.h"
#include "io/atomic_file.h"

namespace tally {
namespace {

constexpr char kMagic[8] = {'T', 'A', 'L', 'L', 'Y', 'K', 'V', 'B'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kWindowFlag = 1;
constexpr const char* kSuffix = ".kvb";
// magic, version, flags, three digests, four u32, the payload size
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 3 * 32 + 4 * 4 + 8;

void put_u32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

std::string hex(const BlockDigest& d) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

// A block file's name: 64 hex digits and the suffix.
bool block_file_name(std::string_view name) {
  if (name.size() != 64 + std::strlen(kSuffix) || name.substr(64) != kSuffix) return false;
  return std::all_of(name.begin(), name.begin() + 64, [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}
bool temporary_name(std::string_view name) {
  return name.size() > 1 && name[0] == '.' && name.find(std::string(kSuffix) + ".tmp-") != std::string_view::npos;
}

struct Entry {
  std::string name;
  uint64_t bytes;
  int64_t mtime_ns;
};

// The block files of a folder (regular files only), oldest use first, and the temporaries.
std::vector<Entry> scan(const std::string& dir, int64_t* temporaries) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) fail("KV cache folder {}: cannot read it: {}", dir, std::strerror(errno));
  std::vector<Entry> out;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    if (temporary_name(name)) {
      if (temporaries) ++*temporaries;
      continue;
    }
    if (!block_file_name(name)) continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({std::string(name), static_cast<uint64_t>(st.st_size),
                   int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec});
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.name < b.name;
  });
  return out;
}

void open_folder(const std::string& dir) {
  std::error_code ec;
  const auto st = std::filesystem::status(dir, ec);
  if (std::filesystem::exists(st) && !std::filesystem::is_directory(st))
    fail("KV cache folder {}: exists and is not a folder", dir);
  if (!std::filesystem::exists(st) && !std::filesystem::create_directories(dir, ec) && ec)
    fail("KV cache folder {}: cannot create it: {}", dir, ec.message());
  if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0)
    fail("KV cache folder {}: not writable: {}", dir, std::strerror(errno));
}

}  // namespace

BlockDigest KvDisk::chain(const BlockDigest& parent, std::span<const int32_t> tokens) {
  Sha256 h;
  h.update(parent.data(), parent.size());
  std::vector<uint8_t> bytes;
  bytes.reserve(tokens.size() * 4);
  for (int32_t t : tokens) put_u32(bytes, static_cast<uint32_t>(t));
  h.update(bytes.data(), bytes.size());
  return h.digest();
}

KvDisk::KvDisk(const KvDiskOptions& o, const KvDiskLayout& layout)
    : dir_(o.dir), budget_(o.budget_bytes ? o.budget_bytes : kDefaultDiskBudget), layout_(layout) {
  if (dir_.empty()) fail("KV cache folder: empty path");
  if (layout.block_size <= 0 || layout.n_layer <= 0 || layout.block_bytes == 0)
    fail("KV cache folder {}: a block layout needs blocks, layers and bytes", dir_);
  open_folder(dir_);
  remove_stale_temporaries(dir_ + "/");
  std::vector<uint8_t> desc;
  put_u64(desc, layout.model_fingerprint);
  put_u32(desc, static_cast<uint32_t>(layout.type));
  put_u64(desc, static_cast<uint64_t>(layout.block_size));
  put_u64(desc, static_cast<uint64_t>(layout.n_layer));
  put_u64(desc, static_cast<uint64_t>(layout.n_window_layers));
  put_u64(desc, layout.block_bytes);
  Sha256 h;
  h.update(desc.data(), desc.size());
  root_ = h.digest();
  for (const Entry& e : scan(dir_, nullptr)) remember(e.name, e.bytes);
}

uint64_t KvDisk::payload_bytes(bool window) const {
  const int64_t layers = layout_.n_layer - layout_.n_window_layers + (window ? layout_.n_window_layers : 0);
  return 2 * static_cast<uint64_t>(layers) * layout_.block_bytes;
}

std::string KvDisk::path_of(const BlockDigest& d) const { return dir_ + "/" + hex(d) + kSuffix; }

void KvDisk::remember(const std::string& name, uint64_t bytes) {
  forget(name);
  lru_.emplace_back(name, bytes);
  files_[name] = std::prev(lru_.end());
  bytes_ += bytes;
}

void KvDisk::forget(const std::string& name) {
  const auto it = files_.find(name);
  if (it == files_.end()) return;
  bytes_ -= it->second->second;
  lru_.erase(it->second);
  files_.erase(it);
}

bool KvDisk::make_room(uint64_t bytes) {
  if (bytes > budget_) return false;
  while (bytes_ + bytes > budget_ && !lru_.empty()) {
    const std::string name = lru_.front().first;
    ::unlink((dir_ + "/" + name).c_str());  // gone already (another process): the same for us
    forget(name);
    ++stats_.evictions;
  }
  return true;
}

bool KvDisk::has(const BlockDigest& d) const {
  struct stat st {};
  return ::stat(path_of(d).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void KvDisk::prefetch(std::span<const BlockDigest> names) const {
  for (const BlockDigest& d : names) {
    const int fd = ::open(path_of(d).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;  // gone since has(): get() counts it
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);  // a hint: its failure changes nothing
    ::close(fd);
  }
}

void KvDisk::put(const BlockDigest& d, const BlockDigest& parent, std::span<const int32_t> tokens, bool window,
                 const std::function<void(uint8_t*)>& fill) {
  const std::string name = hex(d) + kSuffix;
  if (has(d)) return;
  forget(name);  // known but gone (another process removed it): written again
  const uint64_t payload = payload_bytes(window);
  const uint64_t total = kHeaderBytes + tokens.size() * 4 + payload + 32;
  if (!make_room(total)) return;
  buf_.clear();
  for (char c : kMagic) buf_.push_back(static_cast<uint8_t>(c));
  put_u32(buf_, kVersion);
  put_u32(buf_, window ? kWindowFlag : 0);
  for (const BlockDigest* x : {static_cast<const BlockDigest*>(&root_), &d, &parent})
    for (uint8_t b : *x) buf_.push_back(b);
  put_u32(buf_, static_cast<uint32_t>(layout_.block_size));
  put_u32(buf_, static_cast<uint32_t>(layout_.n_layer));
  put_u32(buf_, static_cast<uint32_t>(layout_.n_window_layers));
  put_u32(buf_, 0);
  put_u64(buf_, payload);
  for (int32_t t : tokens) put_u32(buf_, static_cast<uint32_t>(t));
  const size_t at = buf_.size();
  buf_.resize(at + payload);
  fill(buf_.data() + at);
  Sha256 h;
  h.update(buf_.data(), buf_.size());
  const BlockDigest sum = h.digest();
  for (uint8_t b : sum) buf_.push_back(b);
  try {
    AtomicFile f(path_of(d), "KV block", /*sweep=*/false);
    f.write(buf_.data(), buf_.size());
    f.commit();
  } catch (const Error& e) {
    // A full or read-only disk: the block stays in RAM only.
    if (stats_.write_errors++ == 0) stats_.first_write_error = e.what();
    return;
  }
  remember(name, buf_.size());
  ++stats_.written;
  stats_.bytes_written += buf_.size();
}

KvDiskFile::KvDiskFile(KvDiskFile&& o) noexcept
    : fd(std::exchange(o.fd, -1)), name(std::move(o.name)), size(o.size), head(std::move(o.head)), window(o.window) {}

KvDiskFile& KvDiskFile::operator=(KvDiskFile&& o) noexcept {
  if (this != &o) {
    if (fd >= 0) ::close(fd);
    fd = std::exchange(o.fd, -1);
    name = std::move(o.name);
    size = o.size;
    head = std::move(o.head);
    window = o.window;
  }
  return *this;
}

KvDiskFile::~KvDiskFile() {
  if (fd >= 0) ::close(fd);
}

bool KvDiskFile::read(uint64_t offset, void* into, uint64_t n) const {
  auto* out = static_cast<uint8_t*>(into);
  for (uint64_t got = 0; got < n;) {
    const ssize_t r = ::pread(fd, out + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<uint64_t>(r);
  }
  return true;
}

std::optional<KvDiskFile> KvDisk::open(const BlockDigest& d, const BlockDigest& parent,
                                       std::span<const int32_t> tokens, bool need_window) {
  KvDiskFile f;
  f.name = hex(d) + kSuffix;
  f.fd = ::open(path_of(d).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (f.fd < 0) {
    forget(f.name);
    return std::nullopt;
  }
  auto bad = [&]() -> std::optional<KvDiskFile> {
    done(f, false);
    return std::nullopt;
  };
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || !S_ISREG(st.st_mode)) return bad();
  f.size = static_cast<uint64_t>(st.st_size);
  // A newer tally's file (sharing the folder): whatever its size, not ours to judge or remove.
  uint8_t magic[12];
  if (f.size >= sizeof magic && f.read(0, magic, sizeof magic) && std::memcmp(magic, kMagic, 8) == 0 &&
      get_u32(magic + 8) > kVersion) {
    forget(f.name);
    ++stats_.newer;
    return std::nullopt;
  }
  const uint64_t head_bytes = kHeaderBytes + tokens.size() * 4;
  if (f.size < head_bytes + 32 || f.size > head_bytes + payload_bytes(true) + 32) return bad();
  f.head.resize(head_bytes);
  if (!f.read(0, f.head.data(), head_bytes)) return bad();
  const uint8_t* p = f.head.data();
  const uint32_t flags = get_u32(p + 12);
  f.window = flags == kWindowFlag;
  if (std::memcmp(p, kMagic, 8) != 0 || get_u32(p + 8) != kVersion || (flags != 0 && !f.window)) return bad();
  if (std::memcmp(p + 16, root_.data(), 32) != 0 || std::memcmp(p + 48, d.data(), 32) != 0 ||
      std::memcmp(p + 80, parent.data(), 32) != 0)
    return bad();
  if (get_u32(p + 112) != layout_.block_size || get_u32(p + 116) != layout_.n_layer ||
      get_u32(p + 120) != layout_.n_window_layers || get_u32(p + 124) != 0 ||
      get_u64(p + 128) != payload_bytes(f.window))
    return bad();
  if (f.size != head_bytes + payload_bytes(f.window) + 32) return bad();
  for (size_t i = 0; i < tokens.size(); ++i)
    if (get_u32(p + kHeaderBytes + 4 * i) != static_cast<uint32_t>(tokens[i])) return bad();
  if (need_window && !f.window) {  // whole, but written after its window slot was given back
    remember(f.name, f.size);
    return std::nullopt;
  }
  return f;
}

void KvDisk::done(const KvDiskFile& f, bool passed) {
  if (!passed) {
    ::unlink((dir_ + "/" + f.name).c_str());
    forget(f.name);
    ++stats_.corrupt;
    return;
  }
  ::futimens(f.fd, nullptr);  // its last use, for the LRU order of the next scan
  remember(f.name, f.size);
  ++stats_.hits;
  stats_.bytes_read += f.size;
}

bool KvDisk::get(const BlockDigest& d, const BlockDigest& parent, std::span<const int32_t> tokens, bool need_window,
                 const std::function<void(const uint8_t*, bool)>& use) {
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<KvDiskFile> f = open(d, parent, tokens, need_window);
  if (!f) return false;
  const uint64_t head = f->head.size(), payload = f->size - head - 32;
  buf_.resize(payload + 32);
  bool ok = f->read(head, buf_.data(), payload + 32);
  if (ok) {
    Sha256 h;
    h.update(f->head.data(), head);
    h.update(buf_.data(), payload);
    const BlockDigest sum = h.digest();
    ok = std::memcmp(buf_.data() + payload, sum.data(), 32) == 0;
  }
  done(*f, ok);
  if (!ok) return false;
  use(buf_.data(), f->window);
  count_load_time(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return true;
}

KvDiskStats KvDisk::stats() const {
  KvDiskStats s = stats_;
  s.files = static_cast<int64_t>(files_.size());
  s.bytes = bytes_;
  return s;
}

KvDiskUsage KvDisk::usage(const std::string& dir) {
  KvDiskUsage u;
  for (const Entry& e : scan(dir, &u.temporary)) {
    ++u.files;
    u.bytes += e.bytes;
  }
  return u;
}

KvDiskUsage KvDisk::clear(const std::string& dir) {
  KvDiskUsage u;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) fail("KV cache folder {}: cannot read it: {}", dir, std::strerror(errno));
  while (const dirent* e = ::readdir(d)) {
    const std::string_view name(e->d_name);
    const bool block = block_file_name(name), temp = temporary_name(name);
    if (!block && !temp) continue;
    struct stat st {};
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlinkat(::dirfd(d), e->d_name, 0) != 0) continue;
    if (block) {
      ++u.files;
      u.bytes += static_cast<uint64_t>(st.st_size);
    } else {
      ++u.temporary;
    }
  }
  ::closedir(d);
  return u;
}

std::string describe_write_errors(const KvDiskStats& s) {
  if (s.write_errors == 0) return "";
  return fmt::format("{} KV block{} could not be written to the disk tier and stay in RAM only (the first: {})",
                     s.write_errors, s.write_errors == 1 ? "" : "s", s.first_write_error);
}

}  // namespace tally
