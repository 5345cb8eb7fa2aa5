#pragma once
// SHA-256 over a stream of bytes (OpenSSL's libcrypto), as lowercase hex or
// as its 32 bytes. Invariant: hex() or digest() may be called once, after the
// last update().
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tally {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  std::string hex();
  std::array<uint8_t, 32> digest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// The SHA-256 of a whole file; throws tally::Error naming it when it cannot be read.
std::string sha256_of_file(const std::string& path);

}  // namespace tally
