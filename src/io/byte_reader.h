#pragma once
// Bounds-checked little-endian cursor over a byte range. Every read names the
// field it is reading so that a failure says what and where:
//   "<source>: truncated at byte 1234 reading 'tensor_count' (need 8 bytes, 3 left)".
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "core/error.h"

namespace tally {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, uint64_t size, std::string source)
      : data_(data), size_(size), source_(std::move(source)) {}

  uint64_t offset() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  const std::string& source() const { return source_; }

  template <typename T>
  T read(std::string_view field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // read() and read_string() for hot loops: `name()` makes the field's name
  // only when the read fails (a metadata array can hold a million values).
  template <typename T, typename NameFn>
  T read_lazy(NameFn&& name) {
    if (sizeof(T) > size_ - pos_) need(sizeof(T), name());
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  template <typename NameFn>
  std::string read_string_lazy(NameFn&& name) {
    if (8 > size_ - pos_ || read_len() > size_ - pos_ - 8) return read_string(name());
    const uint64_t len = read_len();
    pos_ += 8;
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  // A u64-length-prefixed string, at most max_len bytes.
  std::string read_string(std::string_view field, uint64_t max_len = UINT64_MAX) {
    const uint64_t at = pos_;
    const auto len = read<uint64_t>(field);
    if (len > max_len)
      fail("{}: {} at byte {} has length {} (limit {})", source_, field, at, len, max_len);
    need(len, field);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  void skip(uint64_t n, std::string_view field) {
    need(n, field);
    pos_ += n;
  }

  [[noreturn]] void error_here(std::string_view what) const {
    fail("{}: {} (at byte {})", source_, what, pos_);
  }

 private:
  uint64_t read_len() const {
    uint64_t len;
    std::memcpy(&len, data_ + pos_, 8);
    return len;
  }
  void need(uint64_t n, std::string_view field) const {
    if (n > size_ - pos_)
      fail("{}: truncated at byte {} reading {} (need {} bytes, {} left)", source_, pos_, field, n,
           size_ - pos_);
  }

  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string source_;
};

}  // namespace tally
