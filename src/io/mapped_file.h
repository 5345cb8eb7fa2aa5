#pragma once
// A read-only memory mapping of a whole file. Owns the mapping; move-only.
#include <cstddef>
#include <cstdint>
#include <string>

namespace tally {

class MappedFile {
 public:
  // Throws tally::Error naming the path and the OS error.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Tells the kernel the pages inside [p, p + n) are not needed now (they are
  // re-read from the file if touched again): drops them from resident memory.
  void release(const uint8_t* p, uint64_t n) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace tally
