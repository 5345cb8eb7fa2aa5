#pragma once
// The prefix cache's disk tier: full KV blocks kept as files in a folder, so
// that a cached prefix outlives the pool (an evicted block) and the process
// (a restart, a second `tally run`).
//
// A block is named by a digest chained over the whole prefix it ends:
//   d(-1) = SHA-256(the layout: model fingerprint, cache type, block size,
//                   layers, window layers, bytes per layer's block)
//   d(i)  = SHA-256(d(i-1) || block i's token ids)
// so one name means one prefix of one cache layout: a block of another model
// or cache type is never found under this cache's names, and no 64-bit key
// can be made to collide (the RAM index's keys only find candidates).
//
// File "<dir>/<hex of d(i)>.kvb", little-endian:
//   "TALLYKVB"  u32 version (1)  u32 flags (1: the window layers' K/V follow)
//   d(-1), d(i), d(i-1) (32 bytes each)
//   u32 block size  u32 layers  u32 window layers  u32 0  u64 payload bytes
//   block size x i32 token ids
//   payload: per full layer its block's K then V (block_bytes each), then, with
//            flag 1, per window layer the K then V of the block's window slot
//   32 bytes: SHA-256 of every byte before them
// A file is written through AtomicFile (a temporary name, fsync, rename), so
// one under its name was written whole; a torn, altered, truncated or
// foreign one fails the checks on load, is removed, counted (corrupt) and is
// a miss; one of a newer format version is a miss left in place (a newer
// tally sharing the folder wrote it). get() uses nothing before every check
// passed; open() checks all but the payload's checksum, for a reader that
// uses the payload before its checksum is known (KvRestore) and is ready to
// compute those positions again when done() says it failed.
//
// Budget: the files this tier knows (those of its start-up scan and those it
// wrote since) stay within budget_bytes: a write first removes the least
// recently used files (a hit touches the file's time, which the scan orders
// by) until the new one fits; a block larger than the budget is not written.
// Sharing: several processes may use one folder: files only appear by rename
// and go by unlink, a lookup opens the file by name (a block another process
// wrote is found; one it removed is a miss), each process keeps the budget
// over the files it knows.
//
// Errors while writing (a full disk, a folder made read-only) are counted, the
// first one's message kept for the caller's one warning, and the block stays
// in RAM only: the disk tier never fails a generation. One
// thread owns a KvDisk (not thread-safe).
#include <array>
#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace tally {

using BlockDigest = std::array<uint8_t, 32>;

struct KvDiskOptions {
  std::string dir;            // empty: no disk tier
  uint64_t budget_bytes = 0;  // bytes of block files at most (0: 10 GiB)
};
inline constexpr uint64_t kDefaultDiskBudget = uint64_t{10} << 30;

// What a block file must match, besides its digest.
struct KvDiskLayout {
  uint64_t model_fingerprint = 0;
  DType type = DType::F16;
  int64_t block_size = 0;
  int64_t n_layer = 0;
  int64_t n_window_layers = 0;
  uint64_t block_bytes = 0;  // one layer's block, K (or V), all kv heads
};

// Counters since construction, and the files known now.
struct KvDiskStats {
  uint64_t hits = 0;          // blocks loaded
  uint64_t misses = 0;        // lookups past the last block found (one per lookup that ended on disk)
  uint64_t corrupt = 0;       // files that failed a check (removed)
  uint64_t newer = 0;         // files of a newer format (a newer tally's: left alone, a miss)
  uint64_t written = 0;       // blocks written
  uint64_t write_errors = 0;  // blocks that could not be written (left in RAM only)
  std::string first_write_error;  // why the first of them failed ("" while none has)
  uint64_t evictions = 0;     // files removed for the budget
  uint64_t bytes_read = 0, bytes_written = 0;
  double load_seconds = 0;    // reading and checking the blocks loaded
  int64_t files = 0;
  uint64_t bytes = 0;
};

// One line on the blocks that could not be written ("" when none did fail):
// how many, and the first one's error.
std::string describe_write_errors(const KvDiskStats& s);

// A folder's block files, for `tally cache`.
struct KvDiskUsage {
  int64_t files = 0;
  uint64_t bytes = 0;
  int64_t temporary = 0;  // writes a killed process left behind
};

// A block file whose identity checked out (format, layout, name, parent,
// tokens, size) and whose payload and checksum are still to be read and
// checked: get() reads it at once, KvRestore layer by layer on a thread of
// its own. Owns the open file; move-only.
struct KvDiskFile {
  int fd = -1;
  std::string name;           // in the folder
  uint64_t size = 0;          // the whole file's
  std::vector<uint8_t> head;  // the bytes before the payload (where the checksum starts)
  bool window = false;        // the window layers' K/V follow the full layers'
  KvDiskFile() = default;
  KvDiskFile(KvDiskFile&& o) noexcept;
  KvDiskFile& operator=(KvDiskFile&& o) noexcept;
  ~KvDiskFile();
  // Reads n bytes at `offset` of the file (whole or false: an error or a short file).
  bool read(uint64_t offset, void* into, uint64_t n) const;
};

class KvDisk {
 public:
  // Opens (creating) the folder and scans its block files. Throws
  // tally::Error when the path is not a folder or is not writable.
  KvDisk(const KvDiskOptions& o, const KvDiskLayout& layout);

  const BlockDigest& root() const { return root_; }
  static BlockDigest chain(const BlockDigest& parent, std::span<const int32_t> tokens);

  // Whether a block file exists under the digest (it may still fail its checks).
  bool has(const BlockDigest& d) const;
  // Asks the kernel to start reading these blocks' files now (readahead), so
  // that the disk works on the next files while get() checks and copies one.
  void prefetch(std::span<const BlockDigest> names) const;
  // Writes a block unless its file exists. fill(payload) writes
  // payload_bytes(window) bytes.
  void put(const BlockDigest& d, const BlockDigest& parent, std::span<const int32_t> tokens, bool window,
           const std::function<void(uint8_t* payload)>& fill);
  // Reads and checks the block named d (its parent and tokens must be
  // these); on success calls use(payload, window) and returns true. A
  // missing file, or one without the window layers' K/V when need_window,
  // is false; a bad one is removed, counted and false.
  bool get(const BlockDigest& d, const BlockDigest& parent, std::span<const int32_t> tokens, bool need_window,
           const std::function<void(const uint8_t* payload, bool window)>& use);
  // get() in two halves, for reads that go on while the pool is used: open()
  // checks all but the payload's checksum (a missing or bad file, or one
  // without the window layers' K/V when need_window, is nullopt, as in get());
  // done() takes the verdict of the checksum once the payload was read: a
  // pass counts a hit and its bytes, a fail removes and counts the file.
  std::optional<KvDiskFile> open(const BlockDigest& d, const BlockDigest& parent, std::span<const int32_t> tokens,
                                 bool need_window);
  void done(const KvDiskFile& f, bool passed);
  void count_load_time(double seconds) { stats_.load_seconds += seconds; }
  void count_miss() { ++stats_.misses; }

  uint64_t payload_bytes(bool window) const;
  KvDiskStats stats() const;
  const std::string& dir() const { return dir_; }

  // What a folder holds, and removing it all (block files and temporary
  // ones; other files are left alone). Both throw tally::Error when the
  // folder cannot be read.
  static KvDiskUsage usage(const std::string& dir);
  static KvDiskUsage clear(const std::string& dir);

 private:
  std::string path_of(const BlockDigest& d) const;
  void remember(const std::string& name, uint64_t bytes);  // most recently used
  void forget(const std::string& name);
  bool make_room(uint64_t bytes);  // evicts least recently used files; false if bytes > budget

  std::string dir_;
  uint64_t budget_;
  KvDiskLayout layout_;
  BlockDigest root_;
  // Known files, least recently used first.
  std::list<std::pair<std::string, uint64_t>> lru_;
  std::unordered_map<std::string, std::list<std::pair<std::string, uint64_t>>::iterator> files_;
  uint64_t bytes_ = 0;
  KvDiskStats stats_;
  std::vector<uint8_t> buf_;
};

}  // namespace tally
