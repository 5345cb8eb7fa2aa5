#pragma once
// A file written whole or not at all. The bytes go to a temporary file beside
// the target; commit() flushes it to the disk (fsync) and renames it over the
// target, then syncs the folder's entry. Until commit() succeeds the target
// is untouched, so an interrupted or failed write never leaves a broken file
// under its name.
//
// What may be replaced: a regular file, or nothing yet. A symlink is followed
// to what it names (the link stays a link, its target gets the new bytes).
// A device, a FIFO, a socket or a folder is refused before a byte is written:
// saving to /dev/null must not replace the device with a file.
//
// Temporary names are ".NAME.tmp-PID-XXXXXX" in the target's folder. A
// process killed while writing (kill -9) leaves one behind; the next
// AtomicFile for the same target removes those whose process is gone.
//
// Invariant: the temporary file exists exactly while the AtomicFile is open
// and not committed; the destructor of an uncommitted one removes it.
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace tally {

// The path a write to `path` would replace: symlinks followed (relative
// targets from the link's folder). Throws tally::Error, naming `what` and the
// path, for an empty path, a loop of links, or something that exists and is
// not a regular file.
std::string resolve_write_target(const std::string& path, std::string_view what);

class AtomicFile {
 public:
  // `what` names the file in errors ("session file", "plot"). sweep: first
  // remove the target's stale temporaries (a caller writing many files into
  // one folder sweeps it once instead, with remove_stale_temporaries).
  AtomicFile(const std::string& path, std::string_view what, bool sweep = true);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends n bytes; throws tally::Error naming the OS error (ENOSPC included).
  void write(const void* p, size_t n);
  // fsync, rename over the target, fsync the folder. Throws on failure, after
  // which the target is as it was and the temporary file is gone.
  void commit();

  const std::string& target() const { return target_; }     // resolved
  const std::string& temp_path() const { return temp_; }    // while open
  uint64_t bytes_written() const { return written_; }

 private:
  void discard();

  std::string path_;    // as given (for messages)
  std::string what_;
  std::string target_;  // the regular file the rename replaces
  std::string temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// Removes the temporary files of earlier writes to `target` whose process is
// gone; returns how many. (AtomicFile calls it; exposed for tests.) With an
// empty file name (target "DIR/"), those of every target in DIR.
int remove_stale_temporaries(const std::string& target);

// Writes `bytes` to `path` atomically (an AtomicFile, written and committed).
void write_file_atomically(const std::string& path, std::string_view what, std::string_view bytes);

}  // namespace tally
