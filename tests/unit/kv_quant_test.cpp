// The quantized KV cache (Q8_0, Q4_0): a stored value is within half a step
// of its block's scale (a whole step at Q4_0's clamped top); cache store/load
// and COW copies keep the bytes; a head size that is not a multiple of 32 is
// refused; bytes per position are the block formats' real ones; a saved
// session continues bit for bit; the sliding window works on quantized keys.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/kv_quant.h"
#include "kv/kv_cache.h"
#include "kv/kv_shape.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "session_helpers.h"
#include "test_util.h"
#include "tiny_model.h"

namespace tally {
namespace {

using test::expect_error;

// The stored scale of the 32-value block starting at byte `b`.
float block_scale(const uint8_t* b) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  return f16_to_f32(h);
}

void check_round_trip(DType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> row(row_bytes(t, n));
  std::vector<float> back(x.size());
  kv_store_row(t, x.data(), row.data(), n);
  kv_load_row(t, row.data(), back.data(), n);
  const int64_t bb = traits(t).type_size;
  for (int64_t i = 0; i < n; ++i) {
    const float d = std::fabs(block_scale(row.data() + (i / 32) * bb));
    // Q8_0: half a step. Q4_0: half a step, or a whole one for the value
    // that clamps at the top of the range (+8 steps is not representable).
    if (d == 0) {  // a scale below f16's smallest (max|x| < ~8e-6): the block is stored as zeros
      ASSERT_EQ(back[i], 0.0f) << dtype_name(t) << " value " << i;
      ASSERT_LT(std::fabs(x[i]), 1e-5f);
      continue;
    }
    const double bound = (t == DType::Q8_0 ? 0.5 : 1.0) * d * (1 + 1e-6);
    ASSERT_LE(std::fabs(back[i] - x[i]), bound) << dtype_name(t) << " value " << i << " = " << x[i];
  }
}

TEST(KvQuant, StoredValuesAreWithinTheBlockStep) {
  std::mt19937 rng(3);
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    for (float spread : {1e-3f, 1.0f, 300.0f}) {
      std::normal_distribution<float> g(0, spread);
      std::vector<float> x(256);
      for (auto& v : x) v = g(rng);
      x[37] = 5 * spread;  // an outlier: its block's step grows, the others' do not
      check_round_trip(t, x);
    }
    check_round_trip(t, std::vector<float>(64, 0.0f));             // all zero: scale 0, values 0
    check_round_trip(t, std::vector<float>(32, -2.5f));            // all equal
    std::vector<float> tiny(32, 1e-9f);                            // a scale below f16's range
    check_round_trip(t, tiny);
  }
}

TEST(KvQuant, Q8LargestValueKeepsF16Precision) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 10.5f;
  std::vector<uint8_t> row(34);
  std::vector<float> back(32);
  quantize_row_q8_0(x.data(), row.data(), 32);
  kv_load_row(DType::Q8_0, row.data(), back.data(), 32);
  EXPECT_NEAR(back[31], x[31], std::fabs(x[31]) * 1e-3);  // 127 * f16(max / 127)
}

TEST(KvQuant, CacheStoreLoadAndCopyOnWriteKeepTheBytes) {
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    KvCache c({2, 2, 64}, KvCacheOptions{64, 8, t, 1u << 22, true});
    const auto s = c.create_sequence();
    c.begin_write(s, 0, 12);
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> k(128), v(128), k2(128), v2(128);
    std::vector<std::vector<float>> want_k;
    for (int p = 0; p < 12; ++p)
      for (int l = 0; l < 2; ++l) {
        for (auto& e : k) e = u(rng);
        for (auto& e : v) e = u(rng);
        c.store(l, s, p, k.data(), v.data());
        c.load(l, s, p, k2.data(), v2.data());
        for (int i = 0; i < 128; ++i) {
          ASSERT_LE(std::fabs(k2[i] - k[i]), t == DType::Q8_0 ? 1.0 / 127 : 1.0 / 8 * 1.001) << i;
          ASSERT_LE(std::fabs(v2[i] - v[i]), t == DType::Q8_0 ? 1.0 / 127 : 1.0 / 8 * 1.001) << i;
        }
      }
    // A fork writes into its shared last block: the copy keeps every byte, the source is untouched.
    std::vector<uint8_t> raw_k(c.storage().vec_bytes() * 2), raw_v(raw_k.size()), fk(raw_k.size()), fv(raw_k.size());
    c.load_raw(1, s, 9, raw_k.data(), raw_v.data());
    const auto f = c.fork(s);
    c.begin_write(f, 12, 1);
    c.store(1, f, 12, k.data(), v.data());
    c.load_raw(1, f, 9, fk.data(), fv.data());
    EXPECT_EQ(fk, raw_k) << dtype_name(t);
    EXPECT_EQ(fv, raw_v) << dtype_name(t);
    EXPECT_EQ(c.length(s), 12);
    EXPECT_EQ(c.stats().copied_blocks, 1u);
    // store_raw / load_raw move the block format's bytes unchanged.
    c.store_raw(0, f, 12, raw_k.data(), raw_v.data());
    c.load_raw(0, f, 12, fk.data(), fv.data());
    EXPECT_EQ(fk, raw_k);
    EXPECT_EQ(fv, raw_v);
  }
}

TEST(KvQuant, AHeadSizeNotAMultipleOf32IsRefused) {
  for (DType t : {DType::Q8_0, DType::Q4_0})
    expect_error([&] { KvCache c({1, 1, 48}, KvCacheOptions{32, 8, t, 1u << 20, true}); },
                 {std::string(dtype_name(t)), "multiple of 32", "this model has 48"});
  KvCache ok({1, 1, 48}, KvCacheOptions{32, 8, DType::F16, 1u << 20, true});  // f16 takes any size
  expect_error([&] { KvCache c({1, 1, 64}, KvCacheOptions{32, 8, DType::Q4_1, 1u << 20, true}); },
               {"not supported", "q8_0 or q4_0"});
}

TEST(KvQuant, BytesPerPositionAreTheBlockFormats) {
  const KvShape smollm2{30, 3, 64};  // 2 x 30 layers x 3 heads x 2 blocks
  EXPECT_EQ(kv_bytes_per_token(smollm2, DType::F16), 2u * 30 * 3 * 64 * 2);
  EXPECT_EQ(kv_bytes_per_token(smollm2, DType::Q8_0), 2u * 30 * 3 * 2 * 34);  // 12240
  EXPECT_EQ(kv_bytes_per_token(smollm2, DType::Q4_0), 2u * 30 * 3 * 2 * 18);  // 6480
  KvCache c(smollm2, KvCacheOptions{256, 32, DType::Q8_0, 1u << 30, true});
  EXPECT_EQ(c.storage().bytes(), 256u * 12240);
  EXPECT_EQ(c.storage().vec_bytes(), 68u);
  // The budget check counts the same bytes: 256 positions need 3,133,440.
  expect_error([&] { KvCache d(smollm2, KvCacheOptions{256, 32, DType::Q8_0, 3133439, true}); }, {"memory budget"});
  KvCache fits(smollm2, KvCacheOptions{256, 32, DType::Q8_0, 3133440, true});
}

test::TinySpec spec32() {  // the tiny decoder with heads of 32 (one block per head vector)
  test::TinySpec s;
  s.head_dim = 32;
  s.n_head = 4;
  s.n_kv_head = 2;
  s.n_embd = 128;
  return s;
}

TEST(KvQuant, SavedSessionContinuesBitForBit) {
  const auto tm = test::make_tiny_model(spec32());
  char tmpl[] = "/tmp/tally-kvq-XXXXXX";
  const std::filesystem::path dir = ::mkdtemp(tmpl);
  const std::string file = (dir / "s.tks").string();
  for (DType cache : {DType::Q8_0, DType::Q4_0}) {
    Session whole(*tm->model, test::small_block_session(cache, 128));
    const auto all = generate(whole, test::token_pattern(11), test::greedy_options(20)).tokens;
    Session first(*tm->model, test::small_block_session(cache, 128));
    const auto head = generate(first, test::token_pattern(11), test::greedy_options(8)).tokens;
    first.append(std::span<const int32_t>(&head.back(), 1));
    first.save(file, "m");
    EXPECT_EQ(std::filesystem::file_size(file),
              8 + 4 + 4 + 8 + 4 + 4 * 4 + 8 + 8 + 1 + 19 * 4 + 2 * 2 * 19 * 2 * traits(cache).type_size + 8)
        << "bytes per position must be the block format's";
    Session second(*tm->model, test::small_block_session(cache, 128));
    second.load(file);
    const int32_t last = second.tokens().back();
    second.truncate(18);
    const auto tail = generate(second, std::vector<int32_t>{last}, test::greedy_options(12)).tokens;
    std::vector<int32_t> joined = head;
    joined.insert(joined.end(), tail.begin(), tail.end());
    EXPECT_EQ(joined, all) << dtype_name(cache);
    Session other(*tm->model, test::small_block_session(DType::F16, 128));
    expect_error([&] { other.load(file); }, {"load it into a " + std::string(kv_cache_type_flag(cache)) + " cache"});
  }
  std::filesystem::remove_all(dir);
}

TEST(KvQuant, SlideRerotatesQuantizedKeysAndMovesValuesUnchanged) {
  const auto tm = test::make_tiny_model(spec32());
  const auto& c = tm->model->config();
  for (DType cache : {DType::Q8_0, DType::Q4_0}) {
    const auto t = test::token_pattern(40);
    Session s(*tm->model, test::small_block_session(cache, 40));
    s.append(t);
    std::vector<float> k_before(c.kv_dim()), v_before(c.kv_dim());
    s.read_kv(0, 28, k_before.data(), v_before.data());
    EXPECT_EQ(s.slide(4, 4), 8);
    std::vector<float> k(c.kv_dim()), v(c.kv_dim());
    s.read_kv(0, 20, k.data(), v.data());
    EXPECT_EQ(v, v_before) << "values move as stored bytes";
    // The key computed from scratch at position 20, quantized: the moved key
    // went through one more dequantize-rotate-quantize, so it may differ by
    // a step of either copy's scale per value.
    std::vector<int32_t> fresh(t.begin(), t.begin() + 20);
    fresh.push_back(t[28]);
    Session f(*tm->model, test::small_block_session(cache, 40));
    f.append(fresh);
    std::vector<float> fk(c.kv_dim()), fv(c.kv_dim());
    f.read_kv(0, 20, fk.data(), fv.data());
    for (int64_t b = 0; b < c.kv_dim() / 32; ++b) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(fk[b * 32 + i]));
      const float step = amax / (cache == DType::Q8_0 ? 127.0f : 8.0f) * 1.01f;
      for (int i = 0; i < 32; ++i)
        EXPECT_NEAR(k[b * 32 + i], fk[b * 32 + i], 2 * step) << dtype_name(cache) << " key value " << b * 32 + i;
    }
    // A stream of several windows keeps its sinks and stays inside the window.
    Session z(*tm->model, test::small_block_session(cache, 48));
    GenerateOptions g = test::greedy_options(150);
    g.sinks = 4;
    int64_t longest = 0;
    const auto prompt = test::token_pattern(10);
    const GenerateResult r = generate(z, prompt, g, [&](const Emission&) { longest = std::max(longest, z.length()); });
    EXPECT_EQ(r.tokens.size(), 150u);
    EXPECT_LE(longest, 48);
    EXPECT_EQ(std::vector<int32_t>(z.tokens().begin(), z.tokens().begin() + 4),
              std::vector<int32_t>(prompt.begin(), prompt.begin() + 4));
  }
}

}  // namespace
}  // namespace tally
