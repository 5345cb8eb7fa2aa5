// GGUF reader: round trips through the in-memory writer (gguf_builder.h),
// every kind of bad input (each error must name the field and the byte
// offset), and a cross-check against gguf-py on a gguf-py-written file and on
// the default model (fixtures from scripts/fixtures/make_gguf_fixtures.py).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "tokenizer_test_util.h"
#include "gguf_builder.h"
#include "io/gguf.h"
#include "kernels/dequantize.h"
#include "test_model_path.h"

namespace tally {
namespace {

using json = nlohmann::json;
using namespace tally::test;

// Tensor type ids (the metadata value type ids kU8... come from gguf_builder.h).
constexpr uint32_t kTF32 = 0, kTF16 = 1, kTQ4_0 = 2, kTQ4_1 = 3, kTQ8_0 = 8, kTQ2_K = 10, kTQ4_K = 12;

std::vector<uint8_t> bytes_of(size_t n, uint8_t seed = 1) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (uint8_t)(seed + 31 * i);
  return v;
}

// The message of the tally::Error that parsing `b` throws ("" + a test
// failure when it parses, or when anything else is thrown).
std::string parse_error(const std::vector<uint8_t>& b) {
  try {
    GgufFile f(b.data(), b.size(), "t.gguf");
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-tally exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "parsed without error";
  return "";
}

bool has_byte(const std::string& msg, uint64_t at) {
  return std::regex_search(msg, std::regex("byte " + std::to_string(at) + "\\b"));
}

// Expects the message to start with the source name, to contain every string
// in `parts` and, when given, to name byte offset `at`.
void expect_error(const std::vector<uint8_t>& b, std::initializer_list<std::string> parts,
                  std::optional<uint64_t> at = std::nullopt) {
  const std::string msg = parse_error(b);
  EXPECT_EQ(msg.rfind("t.gguf: ", 0), 0u) << msg;
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  if (at) {
    EXPECT_TRUE(has_byte(msg, *at)) << "byte " << *at << " not in: " << msg;
  }
}

template <typename T>
void patch(std::vector<uint8_t>& b, uint64_t at, T v) {
  ASSERT_LE(at + sizeof(T), b.size());
  std::memcpy(b.data() + at, &v, sizeof(T));
}

// A small valid file that uses every metadata type and a few tensor types.
GgufBuilder every_type_builder(uint32_t version) {
  GgufBuilder g(version);
  g.kv("u8", m_u8(255))
      .kv("i8", m_i8(-128))
      .kv("u16", m_u16(65535))
      .kv("i16", m_i16(-32768))
      .kv("u32", m_u32(4000000000u))
      .kv("i32", m_i32(-2000000000))
      .kv("f32", m_f32(-1.5f))
      .kv("bool.t", m_bool(true))
      .kv("bool.f", m_bool(false))
      .kv("str", m_str("h\xc3\xa9llo"))
      .kv("str.empty", m_str(""))
      .kv("str.nul", m_str(std::string_view("a\0b", 3)))
      .kv("u64", m_u64(UINT64_MAX))
      .kv("i64", m_i64(INT64_MIN))
      .kv("f64", m_f64(1e300))
      .kv("arr.u8", m_array(kU8, {m_u8(1), m_u8(2), m_u8(3)}))
      .kv("arr.empty", m_array(kF32, {}))
      .kv("arr.str", m_strings({"a", "", "\xc4\xa0the"}))
      .kv("arr.nested", m_array(kArray, {m_array(kI32, {m_i32(1), m_i32(-2)}),
                                         m_array(kI32, {}),
                                         m_array(kI32, {m_i32(3), m_i32(4), m_i32(5)})}))
      .kv("arr.nested.str", m_array(kArray, {m_strings({"x", "yz"}), m_strings({"w"})}))
      .tensor("t.f32", {4, 2}, kTF32, bytes_of(32))
      .tensor("t.q4_1", {64, 3}, kTQ4_1, bytes_of(6 * 20, 2))
      .tensor("t.f16", {3}, kTF16, bytes_of(6, 3))
      .tensor("t.q8_0", {32}, kTQ8_0, bytes_of(34, 4))
      .tensor("t.q4_k", {256}, kTQ4_K, bytes_of(144, 5));
  return g;
}

class GgufVersions : public ::testing::TestWithParam<uint32_t> {};
INSTANTIATE_TEST_SUITE_P(Gguf, GgufVersions, ::testing::Values(2u, 3u));

TEST_P(GgufVersions, RoundTripsEveryMetadataType) {
  const auto b = every_type_builder(GetParam()).build();
  GgufFile f(b.data(), b.size(), "t.gguf");
  EXPECT_EQ(f.version(), GetParam());
  EXPECT_EQ(f.path(), "t.gguf");
  EXPECT_EQ(f.file_size(), b.size());
  ASSERT_EQ(f.metadata().size(), 20u);
  EXPECT_EQ(f.metadata()[0].first, "u8");
  EXPECT_EQ(f.metadata()[19].first, "arr.nested.str");

  EXPECT_EQ(f.get("u8").type, GgufType::U8);
  EXPECT_EQ(f.get("u8").u, 255u);
  EXPECT_EQ(f.get("i8").type, GgufType::I8);
  EXPECT_EQ(f.get("i8").i, -128);
  EXPECT_EQ(f.get("u16").u, 65535u);
  EXPECT_EQ(f.get("i16").i, -32768);
  EXPECT_EQ(f.get("u32").type, GgufType::U32);
  EXPECT_EQ(f.get("u32").u, 4000000000u);
  EXPECT_EQ(f.get("i32").i, -2000000000);
  EXPECT_EQ(f.get("f32").type, GgufType::F32);
  EXPECT_EQ(f.get("f32").f, -1.5);
  EXPECT_EQ(f.get("bool.t").type, GgufType::BOOL);
  EXPECT_TRUE(f.get_bool("bool.t", false));
  EXPECT_FALSE(f.get_bool("bool.f", true));
  EXPECT_EQ(f.get_string("str"), "h\xc3\xa9llo");
  EXPECT_EQ(f.get_string("str.empty"), "");
  EXPECT_EQ(f.get_string("str.nul"), std::string("a\0b", 3));
  EXPECT_EQ(f.get("u64").type, GgufType::U64);
  EXPECT_EQ(f.get_u64("u64"), UINT64_MAX);
  EXPECT_EQ(f.get("i64").type, GgufType::I64);
  EXPECT_EQ(f.get("i64").as_i64("i64"), INT64_MIN);
  EXPECT_EQ(f.get("f64").type, GgufType::F64);
  EXPECT_EQ(f.get_f64("f64", 0), 1e300);

  const auto& u8s = f.get("arr.u8");
  EXPECT_EQ(u8s.type, GgufType::ARRAY);
  EXPECT_EQ(u8s.elem_type, GgufType::U8);
  ASSERT_EQ(u8s.arr.size(), 3u);
  EXPECT_EQ(u8s.arr[2].u, 3u);
  EXPECT_EQ(u8s.arr[2].type, GgufType::U8);
  EXPECT_EQ(f.get("arr.empty").elem_type, GgufType::F32);
  EXPECT_TRUE(f.get_array("arr.empty").empty());
  const auto& strs = f.get_array("arr.str");
  ASSERT_EQ(strs.size(), 3u);
  EXPECT_EQ(strs[0].s, "a");
  EXPECT_EQ(strs[1].s, "");
  EXPECT_EQ(strs[2].s, "\xc4\xa0the");

  const auto& nested = f.get("arr.nested");
  EXPECT_EQ(nested.elem_type, GgufType::ARRAY);
  ASSERT_EQ(nested.arr.size(), 3u);
  EXPECT_EQ(nested.arr[0].elem_type, GgufType::I32);
  ASSERT_EQ(nested.arr[0].arr.size(), 2u);
  EXPECT_EQ(nested.arr[0].arr[1].i, -2);
  EXPECT_TRUE(nested.arr[1].arr.empty());
  ASSERT_EQ(nested.arr[2].arr.size(), 3u);
  EXPECT_EQ(nested.arr[2].arr[2].i, 5);
  const auto& nstr = f.get("arr.nested.str");
  ASSERT_EQ(nstr.arr.size(), 2u);
  EXPECT_EQ(nstr.arr[0].elem_type, GgufType::STRING);
  EXPECT_EQ(nstr.arr[0].arr[1].s, "yz");
  EXPECT_EQ(nstr.arr[1].arr[0].s, "w");
}

TEST_P(GgufVersions, RoundTripsTensorInfosAndData) {
  Layout lay;
  const auto b = every_type_builder(GetParam()).build(&lay);
  GgufFile f(b.data(), b.size(), "t.gguf");
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset(), lay.data_offset);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  struct Want {
    const char* name;
    std::vector<uint64_t> dims;
    DType type;
    uint64_t offset, n_elements, n_bytes;
  };
  const Want want[] = {
      {"t.f32", {4, 2}, DType::F32, 0, 8, 32},
      {"t.q4_1", {64, 3}, DType::Q4_1, 32, 192, 120},
      {"t.f16", {3}, DType::F16, 160, 3, 6},
      {"t.q8_0", {32}, DType::Q8_0, 192, 32, 34},
      {"t.q4_k", {256}, DType::Q4_K, 256, 256, 144},
  };
  ASSERT_EQ(f.tensors().size(), std::size(want));
  uint64_t total = 0;
  for (size_t k = 0; k < std::size(want); ++k) {
    const auto& t = f.tensors()[k];
    const auto& w = want[k];
    EXPECT_EQ(t.name, w.name);
    EXPECT_EQ(t.dims, w.dims) << w.name;
    EXPECT_EQ(t.type, w.type) << w.name;
    EXPECT_EQ(t.offset, w.offset) << w.name;
    EXPECT_EQ(t.n_elements, w.n_elements) << w.name;
    EXPECT_EQ(t.n_bytes, w.n_bytes) << w.name;
    EXPECT_EQ(t.data, b.data() + lay.data_offset + w.offset) << w.name;
    EXPECT_EQ(f.find_tensor(w.name), &t);
    total += w.n_bytes;
  }
  EXPECT_EQ(f.total_tensor_bytes(), total);
  EXPECT_EQ(f.tensors()[0].shape_string(), "{4, 2}");
  EXPECT_EQ(f.tensors()[0].dim(1), 2u);
  EXPECT_EQ(f.tensors()[0].dim(3), 1u);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  EXPECT_EQ(0, std::memcmp(f.find_tensor("t.q4_k")->data, bytes_of(144, 5).data(), 144));
}

TEST(Gguf, TypedGettersNameTheKey) {
  const auto b = every_type_builder(3).build();
  GgufFile f(b.data(), b.size(), "t.gguf");
  EXPECT_EQ(f.get_u64("u8"), 255u);  // any integer width reads as a number
  EXPECT_EQ(f.get_u64("missing", 7), 7u);
  EXPECT_EQ(f.get_string("missing", "dflt"), "dflt");
  EXPECT_EQ(f.get_f64("f32", 0), -1.5);
  EXPECT_EQ(f.get_f64("i32", 0), -2000000000.0);
  EXPECT_FALSE(f.has("missing"));
  EXPECT_TRUE(f.has("arr.u8"));
  auto expect_key = [](auto fn, const std::string& key) {
    try {
      fn();
      ADD_FAILURE() << key << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
    }
  };
  expect_key([&] { f.get_u64("missing"); }, "missing");
  expect_key([&] { f.get_string("u32"); }, "u32");
  expect_key([&] { f.get_u64("str"); }, "str");
  expect_key([&] { f.get_u64("i8"); }, "i8");  // negative is not a count
  expect_key([&] { f.get_array("f64"); }, "f64");
  expect_key([&] { f.get_bool("str", false); }, "str");
}

TEST(Gguf, CustomAlignment) {
  for (uint32_t al : {1u, 8u, 64u, 256u, 4096u}) {
    Layout lay;
    const auto b = GgufBuilder()
                       .alignment(al)
                       .kv("x", m_str("abc"))
                       .tensor("a", {3}, kTF32, bytes_of(12))
                       .tensor("b", {5}, kTF32, bytes_of(20))
                       .build(&lay);
    GgufFile f(b.data(), b.size(), "t.gguf");
    EXPECT_EQ(f.alignment(), al);
    EXPECT_EQ(f.data_offset(), lay.data_offset) << al;
    EXPECT_EQ(f.data_offset() % al, 0u);
    EXPECT_EQ(f.find_tensor("b")->offset % al, 0u);
    EXPECT_EQ(f.find_tensor("b")->offset, (12 + al - 1) / al * al);
  }
  // A default-aligned (32) offset is misaligned under alignment 64.
  Layout lay;
  const auto b = GgufBuilder()
                     .alignment(64)
                     .tensor_at("a", {8}, kTF32, 0, bytes_of(32))
                     .tensor_at("b", {8}, kTF32, 32, bytes_of(32))
                     .build(&lay);
  expect_error(b, {"'b'", "32", "alignment 64"}, lay.tensors[1].offset);
}

TEST(Gguf, RejectsBadAlignment) {
  for (uint32_t al : {0u, 3u, 48u, 1000u}) {
    const auto b = GgufBuilder().alignment(al).build();
    expect_error(b, {"general.alignment", std::to_string(al)});
  }
  // Not an integer.
  const auto b = GgufBuilder().kv("general.alignment", m_str("32")).build();
  const std::string msg = parse_error(b);
  EXPECT_NE(msg.find("general.alignment"), std::string::npos) << msg;
}

TEST(Gguf, EmptyFilesAndNoTensors) {
  expect_error({}, {"magic"}, 0);
  const auto b = GgufBuilder().build();
  GgufFile f(b.data(), b.size(), "t.gguf");
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.data_offset(), 32u);
  EXPECT_EQ(f.total_tensor_bytes(), 0u);
}

// llama.cpp's vocabulary-only files end before the padding of their empty
// data section; ggml and gguf-py read them, so must we. With tensors, the
// data section must be there.
TEST(Gguf, TensorlessFileMayEndBeforeItsPadding) {
  Layout lay;
  auto b = GgufBuilder().kv("tokenizer.ggml.model", m_str("gpt2")).build(&lay);
  ASSERT_GT(lay.data_offset, lay.kvs[0].value + 8 + 4);
  b.resize(lay.kvs[0].value + 8 + 4);  // right after the last value
  GgufFile f(b.data(), b.size(), "t.gguf");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.data_offset(), lay.data_offset);  // where gguf-py puts it too
  EXPECT_TRUE(f.tensors().empty());

  b = GgufBuilder().kv("k", m_str("v")).tensor("w", {8}, kTF32, bytes_of(32)).build(&lay);
  b.resize(lay.tensors[0].offset + 8);
  expect_error(b, {"data section"});
}

TEST(Gguf, ReadsLlamaCppVocabOnlyFile) {
  TALLY_NEED_SHARED();
  // From the shared tokenizer test data; gguf-py puts its data section at 1719360.
  const std::string path = std::string(TALLY_SHARED_DIR) + "/testdata/tokenizer/ggml-vocab-starcoder.gguf";
  GgufFile f(path);
  EXPECT_EQ(f.file_size(), 1719346u);
  EXPECT_EQ(f.data_offset(), 1719360u);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_array("tokenizer.ggml.tokens").size(), f.get_array("tokenizer.ggml.token_type").size());
}

TEST(Gguf, RejectsWrongMagic) {
  auto b = GgufBuilder().magic(0x4c4d4747).build();  // "GGML"
  expect_error(b, {"magic", "47 47 4d 4c"}, 0);
}

TEST(Gguf, RejectsUnsupportedVersions) {
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    const auto b = GgufBuilder(v).build();
    expect_error(b, {"version " + std::to_string(v)}, Layout::kVersionAt);
  }
}

TEST(Gguf, RejectsHugeCounts) {
  const uint64_t huge[] = {uint64_t{1} << 63, UINT64_MAX, uint64_t{1} << 40, 1000};
  for (uint64_t n : huge) {
    expect_error(GgufBuilder().tensor_count(n).build(), {"tensor_count", std::to_string(n)},
                 Layout::kTensorCountAt);
    expect_error(GgufBuilder().kv_count(n).build(), {"metadata_kv_count", std::to_string(n)},
                 Layout::kKvCountAt);
  }
  // Array element counts, including ones whose byte size overflows u64.
  for (uint32_t et : {kU8, kU64, kString, kArray}) {
    for (uint64_t n : {uint64_t{1} << 63, uint64_t{1} << 62, UINT64_MAX, uint64_t{100}}) {
      Layout lay;
      const auto b = GgufBuilder().kv("big", m_array_raw(et, n, {1, 2, 3, 4})).build(&lay);
      expect_error(b, {"'big'", std::to_string(n)}, lay.kvs[0].value + 4);
    }
  }
  // A huge count inside a nested array.
  Layout lay;
  const auto b = GgufBuilder()
                     .kv("nest", m_array(kArray, {m_array_raw(kU16, uint64_t{1} << 63)}))
                     .build(&lay);
  expect_error(b, {"'nest'", std::to_string(uint64_t{1} << 63)}, lay.kvs[0].value + 12 + 4);
}

TEST(Gguf, RejectsStringsPastTheEnd) {
  Layout lay;
  const auto good = GgufBuilder().kv("key", m_str("hello")).build(&lay);
  // Key length.
  auto b = good;
  patch<uint64_t>(b, lay.kvs[0].start, 1000);
  expect_error(b, {"key of metadata #0", "need 1000 bytes"}, lay.kvs[0].start + 8);
  // Value length, small and absurd.
  for (uint64_t len : {uint64_t{1000}, UINT64_MAX, uint64_t{1} << 63}) {
    b = good;
    patch<uint64_t>(b, lay.kvs[0].value, len);
    expect_error(b, {"metadata 'key'", std::to_string(len)}, lay.kvs[0].value + 8);
  }
  // A string inside an array.
  const auto arr = GgufBuilder().kv("toks", m_strings({"a", "b"})).build(&lay);
  b = arr;
  patch<uint64_t>(b, lay.kvs[0].value + 12 + 9, 5000);  // length of the second string
  expect_error(b, {"metadata 'toks'", "need 5000"}, lay.kvs[0].value + 12 + 9 + 8);
  // Tensor names are limited to 64 bytes.
  const auto t = GgufBuilder().tensor("w", {8}, kTF32, bytes_of(32)).build(&lay);
  b = t;
  patch<uint64_t>(b, lay.tensors[0].start, 65);
  expect_error(b, {"name of tensor #0", "65", "64"}, lay.tensors[0].start);
  expect_error(GgufBuilder().tensor(std::string(65, 'n'), {8}, kTF32, bytes_of(32)).build(),
               {"name of tensor #0", "65"});
  GgufFile ok_64 = [] {
    static const auto b64 = GgufBuilder().tensor(std::string(64, 'n'), {8}, kTF32, bytes_of(32)).build();
    return GgufFile(b64.data(), b64.size(), "t.gguf");
  }();
  EXPECT_EQ(ok_64.tensors()[0].name.size(), 64u);
}

TEST(Gguf, RejectsUnknownValueTypes) {
  Layout lay;
  for (uint32_t t : {13u, 14u, 0x80000000u}) {
    auto b = GgufBuilder().kv("odd", Meta{t, {0, 0, 0, 0}}).build(&lay);
    expect_error(b, {"'odd'", "unknown value type " + std::to_string(t)}, lay.kvs[0].type);
    b = GgufBuilder().kv("odd.arr", m_array_raw(t, 1, {0, 0, 0, 0})).build(&lay);
    expect_error(b, {"'odd.arr'", "element type " + std::to_string(t)}, lay.kvs[0].value);
  }
}

TEST(Gguf, RejectsBadBoolAndDeepNesting) {
  Layout lay;
  auto b = GgufBuilder().kv("flag", Meta{kBool, {2}}).build(&lay);
  expect_error(b, {"'flag'", "bool value 2"}, lay.kvs[0].value);

  Meta m = m_array(kU8, {m_u8(1)});
  for (int depth = 1; depth < 8; ++depth) m = m_array(kArray, {m});  // 8 levels: accepted
  b = GgufBuilder().kv("deep", m).build();
  GgufFile ok(b.data(), b.size(), "t.gguf");
  EXPECT_EQ(ok.get("deep").arr[0].arr[0].arr[0].arr[0].arr[0].arr[0].arr[0].arr[0].u, 1u);
  m = m_array(kArray, {m});  // 9 levels
  expect_error(GgufBuilder().kv("deep", m).build(), {"'deep'", "nested deeper"});
}

TEST(Gguf, RejectsUnknownTensorTypes) {
  for (uint32_t id : {4u, 5u, 31u, 36u, 1000u, UINT32_MAX}) {
    Layout lay;
    const auto b = GgufBuilder().tensor("w", {32}, id, bytes_of(64)).build(&lay);
    expect_error(b, {"'w'", "unknown type id " + std::to_string(id)}, lay.tensors[0].type);
  }
}

// Known but unsupported types load (so files can be inspected); only
// dequantizing them fails, naming the type.
TEST(Gguf, UnsupportedKnownTypeLoadsButDoesNotDequantize) {
  const auto b = GgufBuilder()
                     .tensor("q2k", {256, 2}, kTQ2_K, bytes_of(2 * 84))
                     .tensor("ok", {32}, kTQ4_0, bytes_of(18))
                     .build();
  GgufFile f(b.data(), b.size(), "t.gguf");
  const auto* t = f.find_tensor("q2k");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, DType::Q2_K);
  EXPECT_EQ(t->n_bytes, 168u);
  EXPECT_FALSE(traits(t->type).supported);
  std::vector<float> out(256);
  try {
    dequantize_row(t->type, t->data, out.data(), 256);
    ADD_FAILURE() << "Q2_K dequantized";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Q2_K"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("10"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(dequantize_row(DType::Q4_0, f.find_tensor("ok")->data, out.data(), 32));
}

TEST(Gguf, RejectsBadDimensions) {
  Layout lay;
  for (uint32_t nd : {0u, 5u, 100u}) {
    auto b = GgufBuilder().tensor("w", {8}, kTF32, bytes_of(32)).build(&lay);
    patch<uint32_t>(b, lay.tensors[0].n_dims, nd);
    expect_error(b, {"'w'", std::to_string(nd) + " dimensions"}, lay.tensors[0].start);
  }
  auto b = GgufBuilder().tensor("w", {1, 1, 1, 32}, kTF32, bytes_of(128)).build();
  EXPECT_EQ(GgufFile(b.data(), b.size(), "t.gguf").tensors()[0].n_elements, 32u);

  b = GgufBuilder().tensor("z", {32, 0}, kTF32, {}).build(&lay);
  expect_error(b, {"'z'", "dimension 1 = 0"}, lay.tensors[0].dims[1]);
  b = GgufBuilder().tensor("z", {0}, kTF32, {}).build(&lay);
  expect_error(b, {"'z'", "dimension 0 = 0"}, lay.tensors[0].dims[0]);
  // Element counts that overflow u64, or are absurdly large.
  const uint64_t big = uint64_t{1} << 32;
  b = GgufBuilder().tensor("o", {big, big, 2}, kTF32, {}).build(&lay);
  expect_error(b, {"'o'", "dimension 1"}, lay.tensors[0].dims[1]);
  b = GgufBuilder().tensor("o", {UINT64_MAX}, kTF32, {}).build(&lay);
  expect_error(b, {"'o'", "dimension 0"}, lay.tensors[0].dims[0]);
  b = GgufBuilder().tensor("o", {32, big, 2, 2}, kTQ4_0, {}).build(&lay);
  expect_error(b, {"'o'"});
  // A row that is not a whole number of blocks.
  b = GgufBuilder().tensor("r", {33}, kTQ4_0, bytes_of(64)).build();
  expect_error(b, {"'r'", "33", "Q4_0", "32"});
}

TEST(Gguf, RejectsMisalignedOffsets) {
  for (uint64_t off : {1u, 16u, 31u, 33u}) {
    Layout lay;
    const auto b = GgufBuilder().tensor_at("m", {4}, kTF32, off, bytes_of(16)).build(&lay);
    expect_error(b, {"'m'", std::to_string(off), "alignment 32"}, lay.tensors[0].offset);
  }
}

TEST(Gguf, RejectsTensorDataPastTheEnd) {
  // 64 floats need 256 bytes; only 128 are there.
  auto b = GgufBuilder().tensor("p", {64}, kTF32, bytes_of(128)).build();
  expect_error(b, {"'p'", "256 bytes", "past the end"});
  // Offset beyond the file, and offsets that overflow when added.
  for (uint64_t off : {uint64_t{4096}, UINT64_MAX - 31, uint64_t{1} << 63}) {
    b = GgufBuilder().tensor_at("p", {8}, kTF32, off, {}).build();
    expect_error(b, {"'p'", std::to_string(off)});
  }
  // Exactly at the end is fine.
  b = GgufBuilder().tensor("p", {64}, kTF32, bytes_of(256)).build();
  EXPECT_EQ(GgufFile(b.data(), b.size(), "t.gguf").find_tensor("p")->n_bytes, 256u);
}

TEST(Gguf, RejectsOverlappingTensors) {
  auto b = GgufBuilder()
               .tensor_at("a", {16}, kTF32, 0, bytes_of(64))
               .tensor_at("b", {16}, kTF32, 32, bytes_of(64))
               .build();
  expect_error(b, {"'a'", "'b'", "overlap"});
  b = GgufBuilder()
          .tensor_at("late", {8}, kTF32, 64, bytes_of(32))
          .tensor_at("big", {32}, kTF32, 0, bytes_of(128))
          .build();
  expect_error(b, {"'late'", "'big'", "overlap"});
  b = GgufBuilder()
          .tensor_at("a", {8}, kTF32, 0, bytes_of(32))
          .tensor_at("b", {8}, kTF32, 0, bytes_of(32))
          .build();
  expect_error(b, {"overlap"});
  // Touching is not overlapping.
  b = GgufBuilder()
          .tensor_at("a", {16}, kTF32, 64, bytes_of(64))
          .tensor_at("b", {16}, kTF32, 0, bytes_of(64))
          .build();
  EXPECT_EQ(GgufFile(b.data(), b.size(), "t.gguf").tensors().size(), 2u);
}

TEST(Gguf, RejectsDuplicates) {
  Layout lay;
  auto b = GgufBuilder()
               .tensor("same", {8}, kTF32, bytes_of(32))
               .tensor("same", {8}, kTF32, bytes_of(32))
               .build(&lay);
  expect_error(b, {"duplicate tensor name 'same'"}, lay.tensors[1].start);
  b = GgufBuilder().kv("k", m_u32(1)).kv("other", m_u8(2)).kv("k", m_str("x")).build(&lay);
  expect_error(b, {"duplicate metadata key 'k'"}, lay.kvs[2].start);
}

// Every proper prefix of a valid file is an error, never a crash or a success.
TEST(Gguf, EveryTruncationThrows) {
  for (uint32_t version : {2u, 3u}) {
    const auto full = every_type_builder(version).build();
    GgufFile ok(full.data(), full.size(), "t.gguf");
    for (size_t n = 0; n < full.size(); ++n) {
      // A copy of exactly n bytes, so ASan catches any read past the end.
      std::vector<uint8_t> prefix(full.begin(), full.begin() + n);
      const std::string msg = parse_error(prefix);
      ASSERT_EQ(msg.rfind("t.gguf: ", 0), 0u) << "prefix " << n << ": " << msg;
    }
  }
}

// Single-byte corruptions anywhere in a valid file either parse or throw
// tally::Error (parse_error fails the test on anything else).
TEST(Gguf, ByteCorruptionsNeverEscape) {
  const auto full = every_type_builder(3).build();
  size_t errors = 0, parsed = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0x01}, uint8_t{0x7f}, uint8_t{0x80}, uint8_t{0xff}}) {
      if (full[i] == v) continue;
      auto b = full;
      b[i] = v;
      try {
        GgufFile f(b.data(), b.size(), "t.gguf");
        for (const auto& t : f.tensors())
          if (traits(t.type).supported && t.n_elements <= 4096) {
            std::vector<float> out(t.n_elements);
            dequantize_row(t.type, t.data, out.data(), t.n_elements);
          }
        ++parsed;
      } catch (const Error&) {
        ++errors;
      } catch (const std::exception& e) {
        FAIL() << "byte " << i << " = " << (int)v << ": non-tally exception " << e.what();
      }
    }
  }
  EXPECT_GT(errors, 0u);
  EXPECT_GT(parsed, 0u);
}

// ---- cross-checks against gguf-py ----

json load_json(const std::string& name) {
  const std::string path = std::string(TALLY_FIXTURES_DIR) + "/gguf/" + name;
  std::ifstream in(path);
  if (!in) throw Error("cannot open fixture " + path);
  return json::parse(in);
}

void expect_value(const GgufValue& v, const json& want, const std::string& key) {
  switch (v.type) {
    case GgufType::STRING: EXPECT_EQ(v.s, want.get<std::string>()) << key; break;
    case GgufType::BOOL: EXPECT_EQ(v.u != 0, want.get<bool>()) << key; break;
    case GgufType::F32: EXPECT_EQ((float)v.f, want.get<float>()) << key; break;
    case GgufType::F64: EXPECT_EQ(v.f, want.get<double>()) << key; break;
    case GgufType::I8: case GgufType::I16: case GgufType::I32: case GgufType::I64:
      EXPECT_EQ(v.i, want.get<int64_t>()) << key;
      break;
    case GgufType::ARRAY: ADD_FAILURE() << key << ": unexpected array"; break;
    default: EXPECT_EQ(v.u, want.get<uint64_t>()) << key; break;
  }
}

// Compares what we read with what gguf-py read (see make_gguf_fixtures.py).
void expect_matches_summary(const GgufFile& f, const json& s) {
  EXPECT_EQ(f.version(), s["version"].get<uint32_t>());
  EXPECT_EQ(f.file_size(), s["file_size"].get<uint64_t>());
  EXPECT_EQ(f.alignment(), s["alignment"].get<uint64_t>());
  EXPECT_EQ(f.data_offset(), s["data_offset"].get<uint64_t>());
  ASSERT_EQ(f.metadata().size(), s["metadata_count"].get<size_t>());
  const auto& keys = s["metadata_keys"];
  for (size_t k = 0; k < keys.size(); ++k) EXPECT_EQ(f.metadata()[k].first, keys[k].get<std::string>());
  for (const auto& m : s["metadata"]) {
    const std::string key = m["key"];
    const GgufValue* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    EXPECT_EQ(gguf_type_name(v->type), m["type"].get<std::string>()) << key;
    if (v->type != GgufType::ARRAY) {
      expect_value(*v, m["value"], key);
      continue;
    }
    EXPECT_EQ(gguf_type_name(v->elem_type), m["elem_type"].get<std::string>()) << key;
    if (!m.contains("count")) continue;  // nested: gguf-py does not decode it
    ASSERT_EQ(v->arr.size(), m["count"].get<size_t>()) << key;
    const auto& first = m["first"];
    for (size_t i = 0; i < first.size(); ++i) expect_value(v->arr[i], first[i], key);
  }
  ASSERT_EQ(f.tensors().size(), s["tensor_count"].get<size_t>());
  for (const auto& t : s["tensors"]) {
    const auto& ti = f.tensors()[t["index"].get<size_t>()];
    const std::string name = t["name"];
    EXPECT_EQ(ti.name, name);
    EXPECT_EQ(dtype_name(ti.type), t["type"].get<std::string>()) << name;
    EXPECT_EQ(static_cast<uint32_t>(ti.type), t["type_id"].get<uint32_t>()) << name;
    EXPECT_EQ(ti.dims, t["dims"].get<std::vector<uint64_t>>()) << name;
    EXPECT_EQ(ti.offset, t["offset"].get<uint64_t>()) << name;
    EXPECT_EQ(ti.n_bytes, t["n_bytes"].get<uint64_t>()) << name;
    EXPECT_EQ(ti.data - f.tensors()[0].data, (ptrdiff_t)(ti.offset - f.tensors()[0].offset)) << name;
    EXPECT_EQ(f.find_tensor(name), &ti);
  }
}

// A file written by gguf-py's GGUFWriter (alignment 64, nested array), read from disk.
TEST(Gguf, ReadsGgufPyWrittenFile) {
  const std::string path = std::string(TALLY_FIXTURES_DIR) + "/gguf/tiny.gguf";
  GgufFile f(path);
  EXPECT_EQ(f.path(), path);
  expect_matches_summary(f, load_json("tiny_summary.json"));
  const auto& nested = f.get_array("test.nested");
  ASSERT_EQ(nested.size(), 2u);
  ASSERT_EQ(nested[1].arr.size(), 3u);
  EXPECT_EQ(nested[1].arr[2].as_i64("test.nested"), 5);
  // The Q4_K tensor dequantizes to finite values.
  const auto* q = f.find_tensor("w.q4_k");
  ASSERT_NE(q, nullptr);
  std::vector<float> out(q->n_elements);
  dequantize_row(q->type, q->data, out.data(), q->n_elements);
  for (float x : out) EXPECT_TRUE(std::isfinite(x));
}

TEST(Gguf, OpenErrorsNameThePath) {
  try {
    GgufFile f("/nonexistent/dir/model.gguf");
    ADD_FAILURE() << "opened";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/model.gguf"), std::string::npos) << e.what();
  }
}

TEST(Gguf, MatchesGgufPyOnDefaultModel) {
  const std::string path = tally_test::test_model_path();
  if (path.empty()) {
    if (tally_test::model_required()) FAIL() << "default model not found and TALLY_REQUIRE_MODEL=1";
    GTEST_SKIP() << "default model not found under $TALLY_HOME";
  }
  GgufFile f(path);
  expect_matches_summary(f, load_json("smollm2_summary.json"));
  // The first token_embd blocks are the ones the dequant fixture was cut from.
  const auto* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  std::ifstream in(std::string(TALLY_FIXTURES_DIR) + "/dequant/model_q8_0.bin", std::ios::binary);
  const std::vector<uint8_t> want((std::istreambuf_iterator<char>(in)), {});
  ASSERT_EQ(want.size(), 4u * 34);
  EXPECT_EQ(0, std::memcmp(emb->data, want.data(), want.size()));
}

}  // namespace
}  // namespace tally
