// Regression tests for hostile and careless input (docs/reliability.md): each
// names the class of failure it keeps out. The CLI's side of the same classes
// is checked black-box by tests/cli/cli_errors.sh.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>

#include "core/byte_size.h"
#include "core/number_text.h"
#include "core/printable.h"
#include "io/mapped_file.h"
#include "io/text_file.h"
#include "kv/kv_cache.h"
#include "sizing/hf_config.h"
#include "test_util.h"
#include "tiny_model.h"

namespace tally {
namespace {

using test::expect_error;

// ---- printable text --------------------------------------------------------

TEST(Printable, EscapesControlsAndInvalidBytesAndCuts) {
  EXPECT_EQ(printable("a\x1b[31mb\x07"), "a\\x1b[31mb\\x07");
  EXPECT_EQ(printable("tab\there\nnl"), "tab\\there\\nnl");
  EXPECT_EQ(printable("\xff\xc3(\xc2\x9b"), "\\xff\\xc3(\\u009b");  // invalid bytes, a C1 control (CSI)
  EXPECT_EQ(printable("caf\xc3\xa9 \"q\" \\"), "caf\xc3\xa9 \\\"q\\\" \\\\");
  EXPECT_EQ(excerpt(std::string(1000, 'x'), 4), "xxxx... (1000 bytes)");
  EXPECT_EQ(excerpt("\xe2\x82\xac\xe2\x82\xac", 4), "\xe2\x82\xac... (6 bytes)");  // cut between characters
  PrintableOptions keep;
  keep.escape_quotes = false;
  EXPECT_EQ(printable("say \"\\x\"", keep), "say \"\\x\"");
}

// ---- class: unbounded recursion and echo of untrusted values ---------------

TEST(HfConfigHostile, DeepNestingIsRefusedWhileParsing) {
  const int n = 100000;
  const std::string deep = "{\"num_hidden_layers\": " + std::string(n, '[') + std::string(n, ']') + "}";
  expect_error([&] { shape_from_hf_config_text(deep, "deep.json"); }, {"deep.json", "nested deeper than 64"});
  // 60 levels are fine (and then the field's type is what is wrong).
  const std::string ok = "{\"num_hidden_layers\": " + std::string(60, '[') + std::string(60, ']') + "}";
  expect_error([&] { shape_from_hf_config_text(ok, "ok.json"); }, {"ok.json", "an array of 1 items"});
}

TEST(HfConfigHostile, ErrorsShowTypeOrExcerptNeverTheWholeValue) {
  const std::string big(1 << 20, 'x');
  for (const std::string& value : {"\"" + big + "\"", "[\"" + big + "\"]",
                                   "{\"k\": \"" + big + "\"}"}) {
    try {
      shape_from_hf_config_text("{\"num_hidden_layers\": " + value + "}", "big.json");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  // A syntax error inside a huge string is cut too, and its control byte escaped.
  try {
    shape_from_hf_config_text("{\"a\": \"" + big + "\x01\"}", "bad.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 300u) << e.what();
  }
  expect_error([] { shape_from_hf_config_text(R"({"num_hidden_layers": 30, "num_attention_heads": 9,
      "hidden_size": 576, "intermediate_size": 1536, "vocab_size": 49152, "torch_dtype": "\u001b[2J"})", "c.json"); },
               {"c.json", "unknown weight dtype '\\x1b[2J'"});
}

// ---- class: numbers that wrap, saturate or read as another base -----------

TEST(NumberText, IntegersAreDecimalWholeAndInRange) {
  EXPECT_EQ(parse_integer("42"), 42);
  EXPECT_EQ(parse_integer(" -7 "), -7);
  EXPECT_EQ(parse_integer("+010"), 10);  // not octal
  EXPECT_EQ(parse_integer("-9223372036854775808"), INT64_MIN);
  EXPECT_EQ(parse_integer("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"9223372036854775808", "-9223372036854775809", "99999999999999999999", "0x10", "1e3",
                          "", "-", "+", "1 2", "١٢", "12abc", "--1"})
    EXPECT_FALSE(parse_integer(bad)) << bad;
  EXPECT_EQ(integer_error("-t", "1000", 0, 1024), "");
  EXPECT_EQ(integer_error("-t", "2000", 0, 1024), "-t 2000 is out of range (0 to 1024)");
  EXPECT_EQ(integer_error("-n", "99999999999999999999", 0, INT64_MAX),
            "-n 99999999999999999999 is out of range (0 to 9223372036854775807)");
  EXPECT_EQ(unsigned_error("--seed", "-1", UINT64_MAX), "--seed -1 is out of range (0 to 18446744073709551615)");
  EXPECT_EQ(integer_error("-n", "\x1b[2J", 0, 9), "-n '\\x1b[2J' is not a whole decimal number");
}

TEST(NumberText, RealsAreFiniteDecimals) {
  EXPECT_EQ(parse_real("0.7"), 0.7);
  EXPECT_EQ(parse_real("-2"), -2.0);
  EXPECT_EQ(parse_real("1e-3"), 1e-3);
  EXPECT_EQ(parse_real("+.5"), 0.5);
  for (const char* bad : {"inf", "-inf", "nan", "NaN", "0x1p3", "1e400", "1e-400", "", ".", "1,5", "1e", "e5"})
    EXPECT_FALSE(parse_real(bad)) << bad;
  EXPECT_EQ(real_error("--temp", "inf", 0, 100), "--temp 'inf' is not a finite decimal number");
  EXPECT_EQ(real_error("--top-p", "1.5", 0, 1), "--top-p 1.5 is out of range (0 to 1)");
}

TEST(NumberText, ByteCountsTakeUnitsAndRefuseSigns) {
  EXPECT_EQ(parse_byte_count("1GiB", "--kv-budget"), uint64_t{1} << 30);
  EXPECT_EQ(parse_byte_count(" 512 MiB ", "--kv-budget"), uint64_t{512} << 20);
  expect_error([] { parse_byte_count("-1", "--kv-budget"); }, {"--kv-budget '-1' is not a byte count"});
  expect_error([] { parse_byte_count("0", "--kv-budget"); }, {"--kv-budget is zero bytes"});
  expect_error([] { parse_byte_count("99999999999TiB", "--kv-budget"); }, {"overflows 64 bits"});
  expect_error([] { parse_byte_count(std::string(100000, '9') + "x", "--budget"); }, {"--budget '9999"});
}

// ---- class: unchecked size arithmetic on the run path ----------------------

TEST(KvSizes, OverflowingPlansAndContextsAreRefused) {
  const KvShape smol{30, 3, 64};
  // 2^56 positions x 23040 bytes wrapped to 0 bytes before the products were checked.
  expect_error([&] { KvStorage::planned_bytes(smol, 32, int64_t{1} << 51, DType::F16); }, {"overflows 64 bits"});
  KvCacheOptions o;
  for (int64_t ctx : {kMaxContextTokens + 1, int64_t{1} << 56, INT64_MAX}) {
    o.n_ctx = ctx;
    expect_error([&] { KvCache(smol, o); }, {"above the limit of 16777216 tokens"});
  }
  o.n_ctx = 4096;
  o.block_size = INT64_MAX;
  expect_error([&] { KvCache(smol, o); }, {"block size"});
  // At the limit, the plan is exact and the budget refuses it.
  o.block_size = 32;
  o.n_ctx = kMaxContextTokens;
  o.budget_bytes = uint64_t{1} << 30;
  expect_error([&] { KvCache(smol, o); }, {"386547056640 B", "more than the memory budget"});
}

// ---- class: hangs and files read as what they are not -----------------------

using test::TempDir;

TEST(InputFiles, AFifoIsRefusedAsAModelWithoutWaiting) {
  TempDir dir;
  const std::string fifo = dir / "model.gguf";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Without a writer, a blocking open would never return: run it apart and give it 10 s.
  auto opened = std::async(std::launch::async, [&] {
    try {
      MappedFile m(fifo);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("opened");
  });
  ASSERT_EQ(opened.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "open blocked on a FIFO";
  EXPECT_NE(opened.get().find("not a regular file (a FIFO)"), std::string::npos);
  expect_error([&] { MappedFile m(dir.path()); }, {"not a regular file (a directory)"});
}

TEST(InputFiles, TextFilesAreNeverDirectoriesAndAreBounded) {
  TempDir dir;
  expect_error([&] { read_text_file(dir.path(), "text file", 100); }, {"is a directory, not a text file"});
  expect_error([&] { read_text_file(dir / "none.txt", "text file", 100); }, {"none.txt", "cannot open the text file"});
  std::ofstream(dir / "big.txt") << std::string(101, 'x');
  expect_error([&] { read_text_file(dir / "big.txt", "text file", 100); }, {"big.txt", "101 B", "limit of 100 B"});
  EXPECT_EQ(read_text_file(dir / "big.txt", "text file", 101).size(), 101u);
  // A character device is a stream: endless input stops at the limit.
  expect_error([&] { read_text_file("/dev/zero", "text file", 1 << 20); }, {"/dev/zero", "more than the limit"});
  expect_error([&] { shape_from_hf_config(dir.path()); }, {"is a directory, not a config file"});
}

// ---- class: hyper-parameters the file cannot back --------------------------

std::string tiny_load_error(const test::TinySpec& s) {
  try {
    test::make_tiny_model(s);
  } catch (const Error& e) {
    return e.what();
  }
  return "loaded";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

TEST(ModelHostile, BlockCountMustMatchTheBlocksInTheFile) {
  test::TinySpec s;  // 2 blocks of tensors
  s.meta_of["llama.block_count"] = test::m_u32(uint32_t{1} << 31);  // passed the range check, then failed to allocate
  EXPECT_HAS(tiny_load_error(s), "tiny: llama.block_count = 2147483648, but the file has tensors for 2 blocks (blk.0 to blk.1)");
  s.meta_of["llama.block_count"] = test::m_u32(1);  // blk.1 would be ignored
  EXPECT_HAS(tiny_load_error(s), "tiny: llama.block_count = 1, but the file has tensors of block 1");
  s.meta_of["llama.block_count"] = test::m_u32(3);
  EXPECT_HAS(tiny_load_error(s), "llama.block_count = 3, but the file has tensors for 2 blocks");
}

TEST(ModelHostile, FloatHyperParametersMustBeFinite) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, test::Meta>>{
           {"llama.rope.freq_base", test::m_f32(INFINITY)},
           {"llama.rope.freq_base", test::m_f32(NAN)},
           {"llama.rope.freq_base", test::m_f64(1e300)},  // a float cannot hold it
           {"llama.attention.layer_norm_rms_epsilon", test::m_f32(-1e-5f)},
           {"llama.attention.layer_norm_rms_epsilon", test::m_f64(1e-300)}}) {  // zero as a float
    test::TinySpec s;
    s.meta_of[key] = value;
    const std::string msg = tiny_load_error(s);
    EXPECT_HAS(msg, "tiny: metadata '" + key + "'");
    EXPECT_HAS(msg, "must be a positive finite number");
  }
}

TEST(ModelHostile, MessagesNameTheFileAndOnlyKeysInIt) {
  test::TinySpec s;
  s.meta_of["llama.block_count"] = test::m_str("two");
  EXPECT_HAS(tiny_load_error(s), "tiny: metadata 'llama.block_count' is a string, expected an integer");
  test::TinySpec heads;  // embedding 64 over 1000 heads, and no key_length in the file
  heads.meta_of["llama.attention.head_count"] = test::m_u32(1000);
  heads.meta_of["llama.attention.head_count_kv"] = test::m_u32(1000);
  heads.drop_keys = {"llama.attention.key_length"};
  const std::string msg = tiny_load_error(heads);
  EXPECT_HAS(msg, "tiny: cannot derive the head size: llama.embedding_length = 64 is not a multiple of "
                  "llama.attention.head_count = 1000");
  EXPECT_EQ(msg.find("key_length"), std::string::npos) << msg;
  test::TinySpec arch;
  arch.arch = "llama\x1b[2J";  // the keys follow it, so only the architecture itself is wrong
  EXPECT_HAS(tiny_load_error(arch), "tiny: architecture 'llama\\x1b[2J' is not supported");
}

}  // namespace
}  // namespace tally
