#include "core/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "core/error.h"

namespace tally {

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  if (ctx_->md == nullptr || EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) != 1)
    fail("cannot start a SHA-256 digest (OpenSSL)");
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t n) { EVP_DigestUpdate(ctx_->md, data, n); }

std::array<uint8_t, 32> Sha256::digest() {
  std::array<uint8_t, 32> d{};
  unsigned n = 0;
  if (EVP_DigestFinal_ex(ctx_->md, d.data(), &n) != 1 || n != d.size()) fail("SHA-256 digest failed (OpenSSL)");
  return d;
}

std::string Sha256::hex() {
  const std::array<uint8_t, 32> d = digest();
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) {
    s += digits[d[i] >> 4];
    s += digits[d[i] & 15];
  }
  return s;
}

std::string sha256_of_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open: {}", path, std::strerror(errno));
  Sha256 h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) fail("{}: read error", path);
  return h.hex();
}

}  // namespace tally
