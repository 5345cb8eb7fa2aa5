// Scalar dequantizers against gguf-py's independent implementation
// (fixtures from scripts/fixtures/make_dequant_fixtures.py) and against a few
// hand-computed blocks that pin the layouts down.
//
// Tolerance: the operations are done in the same order as gguf-py (one f32
// rounding per multiply/add), so the output is bit-exact unless the compiler
// fuses d*q + m into an FMA (only possible when built with FMA enabled). A
// fused result differs from the two-rounding one by at most half an ulp of
// d*q, and |d*q| <= 2 * (largest |value| in the block), so we allow one ulp of
// the block's largest magnitude, and demand bit-exactness when __FMA__ is off.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/half.h"
#include "kernels/dequantize.h"

namespace tally {
namespace {

std::vector<uint8_t> read_fixture(const std::string& name) {
  const std::string path = std::string(TALLY_FIXTURES_DIR) + "/dequant/" + name;
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open fixture " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> to_floats(const std::vector<uint8_t>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Compares block by block with the tolerance described at the top.
void expect_matches(DType t, const std::vector<float>& got, const std::vector<float>& want,
                    const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const size_t bs = traits(t).block_size == 1 ? want.size() : traits(t).block_size;
  size_t inexact = 0;
  for (size_t b0 = 0; b0 < want.size(); b0 += bs) {
    float max_abs = 0;
    for (size_t i = b0; i < b0 + bs; ++i) max_abs = std::max(max_abs, std::fabs(want[i]));
    const float tol = std::nextafter(max_abs, INFINITY) - max_abs;
    for (size_t i = b0; i < b0 + bs; ++i) {
      if (bits_of(got[i]) == bits_of(want[i])) continue;
      ++inexact;
      EXPECT_LE(std::fabs(got[i] - want[i]), tol)
          << what << " value " << i << ": got " << got[i] << " want " << want[i];
    }
  }
#if !defined(__FMA__)
  EXPECT_EQ(inexact, 0u) << what << ": not bit-exact";
#endif
}

struct Case {
  const char* stem;
  DType type;
};

const Case kCases[] = {
    {"f32", DType::F32},   {"f16", DType::F16},   {"bf16", DType::BF16}, {"q8_0", DType::Q8_0},
    {"q4_0", DType::Q4_0}, {"q4_1", DType::Q4_1}, {"q5_0", DType::Q5_0}, {"q5_1", DType::Q5_1},
    {"q4_k", DType::Q4_K}, {"q5_k", DType::Q5_K}, {"q6_k", DType::Q6_K},
    {"model_q4_1", DType::Q4_1}, {"model_q8_0", DType::Q8_0},
};

uint64_t values_in(DType t, uint64_t bytes) {
  const auto& tr = traits(t);
  return bytes / tr.type_size * tr.block_size;
}

TEST(Dequantize, MatchesGgufPyFixtures) {
  for (const auto& c : kCases) {
    const auto raw = read_fixture(std::string(c.stem) + ".bin");
    const auto want = to_floats(read_fixture(std::string(c.stem) + ".f32"));
    const uint64_t n = values_in(c.type, raw.size());
    ASSERT_EQ(n, want.size()) << c.stem;
    ASSERT_EQ(row_bytes(c.type, n), raw.size()) << c.stem;
    std::vector<float> got(n, NAN);
    dequantize_row(c.type, raw.data(), got.data(), n);
    expect_matches(c.type, got, want, c.stem);
  }
}

// Unaligned sources (blocks inside a GGUF mapping are at odd offsets) and
// several rows per call give the same values.
TEST(Dequantize, UnalignedSourceAndRowSplitsAgree) {
  for (const auto& c : kCases) {
    const auto raw = read_fixture(std::string(c.stem) + ".bin");
    const uint64_t n = values_in(c.type, raw.size());
    for (size_t shift = 1; shift < 8; ++shift) {
      std::vector<uint8_t> buf(raw.size() + shift);
      std::memcpy(buf.data() + shift, raw.data(), raw.size());
      std::vector<float> got(n);
      dequantize_row(c.type, buf.data() + shift, got.data(), n);
      std::vector<float> aligned(n);
      dequantize_row(c.type, raw.data(), aligned.data(), n);
      EXPECT_EQ(0, std::memcmp(got.data(), aligned.data(), n * 4)) << c.stem << " shift " << shift;
    }
    // One block per call, through the row entry point.
    const auto& tr = traits(c.type);
    std::vector<float> whole(n), pieces(n);
    dequantize_row(c.type, raw.data(), whole.data(), n);
    for (uint64_t b = 0; b < n / tr.block_size; ++b)
      dequantize_row(c.type, raw.data() + b * tr.type_size, pieces.data() + b * tr.block_size,
                     tr.block_size);
    EXPECT_EQ(0, std::memcmp(whole.data(), pieces.data(), n * 4)) << c.stem;
  }
}

// Each per-type row function and per-block function, called directly (the
// matrix kernels and the KV cache call them so), against gguf-py's values.
TEST(Dequantize, PerTypeAndPerBlockFunctionsMatchGgufPy) {
  using RowFn = void (*)(const uint8_t*, float*, uint64_t);
  using BlockFn = void (*)(const uint8_t*, float*);
  struct Fns {
    const char* stem;
    DType type;
    RowFn row;
    BlockFn block;
  };
  const Fns fns[] = {
      {"f32", DType::F32, dequantize_row_f32, nullptr},
      {"f16", DType::F16, dequantize_row_f16, nullptr},
      {"bf16", DType::BF16, dequantize_row_bf16, nullptr},
      {"q8_0", DType::Q8_0, dequantize_row_q8_0, dequantize_block_q8_0},
      {"q4_0", DType::Q4_0, dequantize_row_q4_0, dequantize_block_q4_0},
      {"q4_1", DType::Q4_1, dequantize_row_q4_1, dequantize_block_q4_1},
      {"q5_0", DType::Q5_0, dequantize_row_q5_0, dequantize_block_q5_0},
      {"q5_1", DType::Q5_1, dequantize_row_q5_1, dequantize_block_q5_1},
      {"q4_k", DType::Q4_K, dequantize_row_q4_k, dequantize_block_q4_k},
      {"q5_k", DType::Q5_K, dequantize_row_q5_k, dequantize_block_q5_k},
      {"q6_k", DType::Q6_K, dequantize_row_q6_k, dequantize_block_q6_k},
  };
  for (const auto& f : fns) {
    const auto raw = read_fixture(std::string(f.stem) + ".bin");
    const auto want = to_floats(read_fixture(std::string(f.stem) + ".f32"));
    const uint64_t n = values_in(f.type, raw.size());
    ASSERT_EQ(n, want.size()) << f.stem;
    std::vector<float> b(n, NAN), c(n, NAN);
    f.row(raw.data(), b.data(), n);
    expect_matches(f.type, b, want, std::string(f.stem) + " row function");
    if (!f.block) continue;
    const auto& tr = traits(f.type);
    for (uint64_t blk = 0; blk < n / tr.block_size; ++blk)
      f.block(raw.data() + blk * tr.type_size, c.data() + blk * tr.block_size);
    expect_matches(f.type, c, want, std::string(f.stem) + " block function");
  }
}

TEST(Dequantize, RejectsPartialBlocks) {
  std::vector<uint8_t> raw(1024);
  std::vector<float> out(512);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K}) {
    const uint32_t bs = traits(t).block_size;
    try {
      dequantize_row(t, raw.data(), out.data(), bs + 1);
      ADD_FAILURE() << dtype_name(t) << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string(dtype_name(t))), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::to_string(bs)), std::string::npos) << msg;
    }
  }
  // Zero values is a valid (empty) row.
  EXPECT_NO_THROW(dequantize_row(DType::Q4_K, raw.data(), out.data(), 0));
}

TEST(Dequantize, UnsupportedTypesNameTypeAndId) {
  std::vector<uint8_t> raw(4096);
  std::vector<float> out(1024);
  for (uint32_t id = 0; id < 64; ++id) {
    const auto tr = dtype_traits(id);
    if (!tr || tr->supported) continue;
    try {
      dequantize_row(static_cast<DType>(id), raw.data(), out.data(), tr->block_size);
      ADD_FAILURE() << tr->name << ": no error";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string(tr->name)), std::string::npos) << msg;
      EXPECT_NE(msg.find("id " + std::to_string(id)), std::string::npos) << msg;
    }
  }
}

// Hand-built blocks, independent of gguf-py, that pin each layout down.
void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

TEST(Dequantize, Q4_0AndQ4_1NibbleOrder) {
  uint8_t b0[18] = {};
  put_f16(b0, 0.5f);
  for (int j = 0; j < 16; ++j) b0[2 + j] = (uint8_t)(j | (15 - j) << 4);
  float y[32];
  dequantize_block_q4_0(b0, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;            // low nibble -> value j
    EXPECT_EQ(y[j + 16], (7 - j) * 0.5f) << j + 16;  // high nibble -> value j+16
  }
  uint8_t b1[20] = {};
  put_f16(b1, 2.0f);
  put_f16(b1 + 2, -1.0f);
  for (int j = 0; j < 16; ++j) b1[4 + j] = (uint8_t)(j | (15 - j) << 4);
  dequantize_block_q4_1(b1, y);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 2.0f - 1.0f);
    EXPECT_EQ(y[j + 16], (15 - j) * 2.0f - 1.0f);
  }
}

TEST(Dequantize, Q5HighBitsComeFromLittleEndianU32) {
  uint8_t b[22] = {};
  put_f16(b, 1.0f);
  const uint32_t qh = 0x80000001u | (1u << 17);  // values 0, 17, 31 get the 5th bit
  std::memcpy(b + 2, &qh, 4);
  float y[32];
  dequantize_block_q5_0(b, y);
  for (int i = 0; i < 32; ++i) {
    const bool hi = i == 0 || i == 17 || i == 31;
    EXPECT_EQ(y[i], hi ? 0.0f : -16.0f) << i;
  }
  uint8_t c[24] = {};
  put_f16(c, 1.0f);
  put_f16(c + 2, 0.5f);
  std::memcpy(c + 4, &qh, 4);
  for (int j = 0; j < 16; ++j) c[8 + j] = 0x21;  // low nibble 1, high nibble 2
  dequantize_block_q5_1(c, y);
  EXPECT_EQ(y[0], 17.5f);
  EXPECT_EQ(y[1], 1.5f);
  EXPECT_EQ(y[16], 2.5f);
  EXPECT_EQ(y[17], 18.5f);
  EXPECT_EQ(y[31], 18.5f);
}

TEST(Dequantize, KScaleUnpacking) {
  uint8_t s[12];
  for (int i = 0; i < 12; ++i) s[i] = (uint8_t)(0x5A + 37 * i);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, mn;
    unpack_k_scale_min(s, j, &sc, &mn);
    // The 6-bit fields, rebuilt bit by bit from the layout description.
    int want_sc, want_mn;
    if (j < 4) {
      want_sc = s[j] % 64;
      want_mn = s[j + 4] % 64;
    } else {
      want_sc = s[j + 4] % 16 + 16 * (s[j - 4] / 64);
      want_mn = s[j + 4] / 16 + 16 * (s[j] / 64);
    }
    EXPECT_EQ(sc, want_sc) << j;
    EXPECT_EQ(mn, want_mn) << j;
    EXPECT_LT(sc, 64);
    EXPECT_LT(mn, 64);
  }
}

TEST(Dequantize, Q4_KSubBlockOrder) {
  uint8_t b[144] = {};
  put_f16(b, 1.0f);
  put_f16(b + 2, 1.0f);
  // scales: sub-block j gets scale j+1, min j (all < 16, so the simple case
  // for j < 4 and the low-nibble case for j >= 4).
  for (int j = 0; j < 4; ++j) {
    b[4 + j] = (uint8_t)(j + 1);
    b[4 + j + 4] = (uint8_t)j;
  }
  for (int j = 4; j < 8; ++j) b[4 + j + 4] = (uint8_t)((j + 1) | j << 4);
  for (int i = 0; i < 128; ++i) b[16 + i] = 0x31;  // low nibble 1, high nibble 3
  float y[256];
  dequantize_block_q4_k(b, y);
  for (int v = 0; v < 256; ++v) {
    const int sub = v / 32;
    const int q = sub % 2 == 0 ? 1 : 3;
    EXPECT_EQ(y[v], (float)((sub + 1) * q - sub)) << v;
  }
}

TEST(Dequantize, Q6_KGroupsAndScales) {
  uint8_t b[210] = {};
  // ql: low nibble 5, high nibble 9 everywhere; qh: 2-bit pieces 0,1,2,3.
  for (int i = 0; i < 128; ++i) b[i] = 0x95;
  for (int i = 0; i < 64; ++i) b[128 + i] = (0 << 0) | (1 << 2) | (2 << 4) | (3 << 6);
  for (int i = 0; i < 16; ++i) b[192 + i] = (uint8_t)(int8_t)(i - 8);
  put_f16(b + 208, 0.25f);
  float y[256];
  dequantize_block_q6_k(b, y);
  for (int v = 0; v < 256; ++v) {
    const int g = (v % 128) / 32;  // group inside the half
    const int nib = g < 2 ? 5 : 9;
    const int q = (nib | g << 4) - 32;
    const float sc = (float)(v / 16 - 8);
    EXPECT_EQ(y[v], 0.25f * sc * (float)q) << v;
  }
}

}  // namespace
}  // namespace tally
