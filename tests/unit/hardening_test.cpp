// Regression tests for hostile and careless input (docs/reliability.md): each
// names the class of failure it keeps out. The CLI's side of the same classes
// is checked black-box by tests/cli/cli_errors.sh.
#include <gtest/gtest.h>

#include <string>

#include "core/printable.h"
#include "sizing/hf_config.h"
#include "test_util.h"

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

}  // namespace
}  // namespace tally
