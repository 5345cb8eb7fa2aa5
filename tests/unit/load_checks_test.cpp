// What loading refuses (docs/reliability.md): input files that would hang or
// grow without bound (a FIFO without a writer, a stream past its limit),
// weights that are not finite, and GGUF metadata or tensors that would be
// ignored or defaulted. Each test names the class it keeps out.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/half.h"
#include "io/text_file.h"
#include "kernels/dequantize.h"
#include "test_util.h"
#include "tiny_model.h"

namespace tally {
namespace {

using test::expect_error;

using test::TempDir;

// read_text_file in a thread of its own, given 10 s: its error, or "read: " and the text.
std::string read_within_10s(const std::string& path, InputKind kind, uint64_t max_bytes = 1 << 20) {
  auto r = std::async(std::launch::async, [=] {
    try {
      return "read: " + read_text_file(path, "text file", max_bytes, kind);
    } catch (const Error& e) {
      return std::string(e.what());
    }
  });
  if (r.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << path << ": still reading after 10 s";
    std::abort();  // the thread cannot be cancelled; a hang is the failure
  }
  return r.get();
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

// ---- class: inputs that would be waited on forever -------------------------

TEST(InputFiles, AFifoWithoutAWriterIsRefusedAtOnce) {
  TempDir dir;
  const std::string fifo = dir / "text";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (InputKind kind : {InputKind::FileOrStream, InputKind::File}) {
    const std::string msg = read_within_10s(fifo, kind);
    EXPECT_HAS(msg, fifo);
    EXPECT_HAS(msg, kind == InputKind::File ? "not a regular file (a FIFO)" : "no process has the FIFO open for writing");
  }
}

TEST(InputFiles, AFifoWithAWriterIsReadToItsEnd) {
  TempDir dir;
  const std::string fifo = dir / "text";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // The writer holds the FIFO open (O_RDWR does not wait) with text in it,
  // and closes it a little after the reader has started: the reader must
  // take the text, then wait for the end as `cat` does.
  const int w = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(w, 0);
  ASSERT_EQ(::write(w, "hello ", 6), 6);
  std::thread closer([w] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    (void)::write(w, "world", 5);
    ::close(w);
  });
  EXPECT_EQ(read_within_10s(fifo, InputKind::FileOrStream), "read: hello world");
  closer.join();
}

TEST(InputFiles, PipesAreStreamsUpToTheLimit) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ASSERT_EQ(::write(p[1], "abc", 3), 3);
  ::close(p[1]);
  EXPECT_EQ(read_within_10s("/proc/self/fd/" + std::to_string(p[0]), InputKind::FileOrStream), "read: abc");
  ::close(p[0]);
  // An empty pipe (its writer gone without a word) is empty text, not "no writer".
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[1]);
  EXPECT_EQ(read_within_10s("/proc/self/fd/" + std::to_string(p[0]), InputKind::FileOrStream), "read: ");
  ::close(p[0]);
  // Past the limit: refused as soon as the count passes it.
  ASSERT_EQ(::pipe(p), 0);
  const std::string big(3000, 'x');
  ASSERT_EQ(::write(p[1], big.data(), big.size()), static_cast<ssize_t>(big.size()));
  ::close(p[1]);
  EXPECT_HAS(read_within_10s("/proc/self/fd/" + std::to_string(p[0]), InputKind::FileOrStream, 1000),
             "holds more than the limit of 1000 B");
  ::close(p[0]);
}

TEST(InputFiles, FolderFilesMustBeRegularFiles) {
  TempDir dir;
  std::ofstream(dir / "config.json") << "{}";
  EXPECT_EQ(read_within_10s(dir / "config.json", InputKind::File), "read: {}");
  EXPECT_HAS(read_within_10s("/dev/zero", InputKind::File), "/dev/zero: not a regular file (a character device)");
  EXPECT_HAS(read_within_10s("/dev/null", InputKind::File), "not a regular file (a character device)");
  // A stream may be a character device, up to the limit.
  EXPECT_HAS(read_within_10s("/dev/zero", InputKind::FileOrStream, 1 << 16), "holds more than the limit");
}

// ---- class: weights that are not finite ------------------------------------

std::string load_error(const test::TinySpec& s) {
  try {
    test::make_tiny_model(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "loaded";
}

std::vector<uint8_t> f32_bytes(float v) {
  std::vector<uint8_t> b(4);
  std::memcpy(b.data(), &v, 4);
  return b;
}
std::vector<uint8_t> f16_bytes(uint16_t h) { return {static_cast<uint8_t>(h & 0xff), static_cast<uint8_t>(h >> 8)}; }

TEST(WeightCheck, AFloatMatrixValueThatIsNotFiniteIsNamed) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    test::TinySpec s;  // F32 matrices; token_embd is {64, 50}: row 3, column 5
    s.patch_of["token_embd.weight"] = {(3 * 64 + 5) * 4, f32_bytes(bad)};
    EXPECT_HAS(load_error(s),
               "tiny: tensor 'token_embd.weight' holds a value that is not finite (NaN or infinite) in row 3, column 5");
  }
  test::TinySpec last;  // the last value of the last matrix
  last.patch_of["blk.1.ffn_down.weight"] = {(64 * 96 - 1) * 4, f32_bytes(NAN)};
  EXPECT_HAS(load_error(last), "'blk.1.ffn_down.weight' holds a value that is not finite (NaN or infinite) in row 63, column 95");
}

TEST(WeightCheck, ABlockScaleThatIsNotFiniteIsNamed) {
  for (uint16_t bad : {uint16_t{0x7e00}, uint16_t{0x7c00}, uint16_t{0xfc00}, uint16_t{0x7c01}}) {  // NaN, +-inf, a signalling NaN
    test::TinySpec s;
    s.matrix_type = DType::Q8_0;  // 34-byte blocks of 32; attn_q is {64, 64}: row 2, block 1
    s.patch_of["blk.0.attn_q.weight"] = {(2 * 2 + 1) * 34, f16_bytes(bad)};
    EXPECT_HAS(load_error(s), "tiny: tensor 'blk.0.attn_q.weight' holds a value that is not finite (NaN or infinite) "
                              "in row 2, column 32 (a block scale)");
  }
  // The largest finite scale is a weight like any other.
  test::TinySpec big;
  big.matrix_type = DType::Q8_0;
  big.patch_of["blk.0.attn_q.weight"] = {0, f16_bytes(0x7bff)};
  EXPECT_EQ(load_error(big), "loaded");
}

TEST(WeightCheck, ANormValueThatIsNotFiniteIsNamed) {
  test::TinySpec s;
  s.patch_of["blk.1.ffn_norm.weight"] = {7 * 4, f32_bytes(INFINITY)};
  EXPECT_HAS(load_error(s), "tiny: tensor 'blk.1.ffn_norm.weight' holds a value that is not finite (NaN or infinite) at index 7");
}

// first_non_finite reads only the scales of block types: that is enough
// exactly when a block's values are all finite while its scales are, and a
// scale that is not makes values that are not. Checked against the
// dequantizer on random blocks of every block type.
TEST(WeightCheck, ScalesDecideWhetherABlockIsFinite) {
  struct Case {
    DType type;
    std::vector<uint32_t> scales;  // byte offsets of the f16 scales in a block
  };
  const std::vector<Case> cases = {{DType::Q8_0, {0}},    {DType::Q4_0, {0}},    {DType::Q5_0, {0}},
                                   {DType::Q4_1, {0, 2}}, {DType::Q5_1, {0, 2}}, {DType::Q4_K, {0, 2}},
                                   {DType::Q5_K, {0, 2}}, {DType::Q6_K, {208}}};
  std::mt19937 rng(7);
  for (const Case& c : cases) {
    const auto& tr = traits(c.type);
    const uint64_t blocks = 6, n = blocks * tr.block_size;
    std::vector<uint8_t> data(blocks * tr.type_size);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    // Every scale finite, up to the largest f16.
    for (uint64_t b = 0; b < blocks; ++b)
      for (uint32_t off : c.scales) {
        const uint16_t h = b == 0 ? 0x7bff : static_cast<uint16_t>(rng() & 0x7bff);
        std::memcpy(data.data() + b * tr.type_size + off, &h, 2);
      }
    std::vector<float> out(n);
    dequantize_row(c.type, data.data(), out.data(), n);
    for (float v : out) ASSERT_TRUE(std::isfinite(v)) << tr.name;
    EXPECT_EQ(first_non_finite(c.type, data.data(), n), -1) << tr.name;
    for (uint32_t off : c.scales)
      for (uint16_t bad : {uint16_t{0x7e00}, uint16_t{0xfc00}}) {
        auto broken = data;
        std::memcpy(broken.data() + 4 * tr.type_size + off, &bad, 2);
        EXPECT_EQ(first_non_finite(c.type, broken.data(), n), static_cast<int64_t>(4 * tr.block_size))
            << tr.name << " scale at byte " << off;
        dequantize_row(c.type, broken.data(), out.data(), n);
        bool any = false;
        for (uint64_t i = 4 * tr.block_size; i < 5 * tr.block_size; ++i) any |= !std::isfinite(out[i]);
        EXPECT_TRUE(any) << tr.name << ": byte " << off << " is not a scale";
      }
  }
}

TEST(WeightCheck, FloatTypesAreTestedValueByValue) {
  // Across the scan's chunks: a bad value early, late and alone in a long tensor.
  for (uint64_t at : {uint64_t{0}, uint64_t{2047}, uint64_t{2048}, uint64_t{9999}}) {
    std::vector<float> f(10000, 1.0f);
    f[at] = NAN;
    EXPECT_EQ(first_non_finite(DType::F32, reinterpret_cast<const uint8_t*>(f.data()), f.size()), static_cast<int64_t>(at));
    std::vector<uint16_t> h(10000, f32_to_f16(1.0f));
    h[at] = 0x7c00;
    EXPECT_EQ(first_non_finite(DType::F16, reinterpret_cast<const uint8_t*>(h.data()), h.size()), static_cast<int64_t>(at));
    std::vector<uint16_t> b(10000, 0x3f80);  // bf16 1.0
    b[at] = 0xff80;                          // bf16 -inf
    EXPECT_EQ(first_non_finite(DType::BF16, reinterpret_cast<const uint8_t*>(b.data()), b.size()), static_cast<int64_t>(at));
  }
  // The largest finite values are finite.
  const std::vector<float> big = {std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 0.0f};
  EXPECT_EQ(first_non_finite(DType::F32, reinterpret_cast<const uint8_t*>(big.data()), big.size()), -1);
  const std::vector<uint16_t> big16 = {0x7bff, 0xfbff, 0x7f7f};  // f16 max, f16 -max; as bf16, 0x7f7f is finite
  EXPECT_EQ(first_non_finite(DType::F16, reinterpret_cast<const uint8_t*>(big16.data()), 2), -1);
  EXPECT_EQ(first_non_finite(DType::BF16, reinterpret_cast<const uint8_t*>(big16.data() + 2), 1), -1);
}

// ---- class: metadata and tensors that would be defaulted or ignored --------

TEST(ModelAcceptance, MetadataIsTakenAsWrittenOrRefused) {
  test::TinySpec b;
  b.meta_of["llama.block_count"] = test::m_bool(true);
  EXPECT_HAS(load_error(b), "tiny: metadata 'llama.block_count' is a bool, expected an integer");
  test::TinySpec v;
  v.meta_of["llama.vocab_size"] = test::m_u32(0);
  EXPECT_HAS(load_error(v), "tiny: metadata 'llama.vocab_size' = 0 is out of range");
  test::TinySpec e;
  e.drop_keys = {"llama.attention.layer_norm_rms_epsilon"};
  EXPECT_HAS(load_error(e), "tiny: missing metadata 'llama.attention.layer_norm_rms_epsilon'");
}

TEST(ModelAcceptance, ATensorTheModelDoesNotUseIsRefused) {
  test::TinySpec s;  // llama has no biases: one would be ignored
  s.extra_tensors["blk.0.attn_q.bias"] = {{64}, static_cast<uint32_t>(DType::F32), std::vector<uint8_t>(64 * 4)};
  EXPECT_HAS(load_error(s), "tiny: tensor 'blk.0.attn_q.bias' is not one a llama model uses; it would be ignored");
  test::TinySpec r;
  r.extra_tensors["rope_freqs.weight"] = {{8}, static_cast<uint32_t>(DType::F32), std::vector<uint8_t>(8 * 4)};
  EXPECT_HAS(load_error(r), "tensor 'rope_freqs.weight' is not one a llama model uses");
  EXPECT_EQ(load_error(test::TinySpec{}), "loaded");
}

}  // namespace
}  // namespace tally
