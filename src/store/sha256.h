#pragma once
// SHA-256 over a stream of bytes (OpenSSL's libcrypto), as lowercase hex.
// Invariant: hex() may be called once, after the last update().
#include <cstddef>
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

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// The SHA-256 of a whole file; throws tally::Error naming it when it cannot be read.
std::string sha256_of_file(const std::string& path);

}  // namespace tally
