#pragma once
// Small helpers shared by the unit tests.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu_features.h"

namespace tally::test {

// The bytes of a committed fixture (tests/fixtures/NAME); a missing one fails the test.
inline std::string read_fixture(const std::string& name) {
  std::ifstream in(std::string(TALLY_FIXTURES_DIR) + "/" + name, std::ios::binary);
  EXPECT_TRUE(in) << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs fn, expects a tally::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    return;
  }
  ADD_FAILURE() << "no tally::Error thrown";
}

// A folder under /tmp for one test, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tally-test-XXXXXX";
    const char* p = ::mkdtemp(tmpl);
    if (p == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sets the kernels' SIMD level for a scope (clamped to what the CPU supports).
class SimdLevelScope {
 public:
  explicit SimdLevelScope(SimdLevel level) : saved_(simd_level()) { set_simd_level(level); }
  ~SimdLevelScope() { set_simd_level(saved_); }
  SimdLevelScope(const SimdLevelScope&) = delete;
  SimdLevelScope& operator=(const SimdLevelScope&) = delete;

 private:
  SimdLevel saved_;
};

// Value i of a cached vector stored as F32, F16, Q8_0 or Q4_0 at p (unaligned).
inline float stored_value(const uint8_t* p, int64_t i, DType t) {
  if (t == DType::Q8_0 || t == DType::Q4_0) {
    const uint8_t* b = p + (i / 32) * (t == DType::Q8_0 ? 34 : 18);
    uint16_t dh;
    std::memcpy(&dh, b, 2);
    const int j = static_cast<int>(i % 32);
    const int q = t == DType::Q8_0 ? static_cast<int8_t>(b[2 + j])
                                   : (j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4)) - 8;
    return static_cast<float>(q) * f16_to_f32(dh);
  }
  if (t == DType::F32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return f16_to_f32(h);
}

}  // namespace tally::test
