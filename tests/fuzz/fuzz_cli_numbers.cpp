// libFuzzer target for how the CLI reads numbers and sizes: the strict
// validators of tools/tally/option_checks.h inside a real CLI11 parse, and the
// byte-count and token-list parsers. Properties: whatever CLI11 accepts is
// exactly the number the text says (no wrap, saturation, octal or hex), a
// refusal is a CLI11 ParseError or a tally::Error, and sizes read back.
//
// Input: fields separated by '\n'. First byte even: the fields are the values
// of --i32, --i64, --u64, --f32, --list, --ranged, --tokens in that order;
// odd: they are the raw arguments after the program name. Every option has
// a range, as the CLI requires of each number option.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/number_text.h"
#include "fuzz_checks.h"
#include "option_checks.h"
#include "sizing/kv_plan.h"

namespace {

[[noreturn]] void violated(const char* what, const std::string& text) {
  std::fprintf(stderr, "fuzz_cli_numbers: property violated: %s: '%.200s'\n", what, text.c_str());
  std::abort();
}

std::vector<std::string> fields(const uint8_t* data, size_t size) {
  std::vector<std::string> out(1);
  for (size_t i = 1; i < size && out.size() <= 16; ++i) {
    if (data[i] == '\n')
      out.emplace_back();
    else
      out.back().push_back(static_cast<char>(data[i]));
  }
  return out;
}

// One app for the whole run (building it per input would dominate the time);
// clear() resets what a parse recorded.
struct Cli {
  CLI::App app;
  int32_t i32 = 0;
  int64_t i64 = 0, ranged = 0, tokens = 0;
  uint64_t u64 = 0;
  float f32 = 0;
  std::vector<int64_t> list;
  CLI::Option *o_i32, *o_i64, *o_u64, *o_f32, *o_list, *o_ranged, *o_tokens;
  Cli() {
    using namespace tally::cli;
    o_i32 = app.add_option("--i32", i32)->transform(integer_in(INT32_MIN, INT32_MAX));
    o_i64 = app.add_option("--i64", i64)->transform(integer_in(INT64_MIN, INT64_MAX));
    o_u64 = app.add_option("--u64", u64)->transform(unsigned_in(UINT64_MAX));
    o_f32 = app.add_option("--f32", f32)->transform(real_in(-FLT_MAX, FLT_MAX));
    o_list = app.add_option("--list", list)->delimiter(',')->transform(integer_in(INT64_MIN, INT64_MAX));
    o_ranged = app.add_option("--ranged", ranged)->transform(integer_in(-5, 1 << 24));
    o_tokens = app.add_option("--tokens", tokens)->transform(token_count_in(1, 1 << 24));
    strict_numbers(app);
  }
};

void parse_cli(const std::vector<std::string>& args, bool structured) {
  static Cli cli;
  cli.app.clear();
  auto& [app, i32, i64, ranged, tokens, u64, f32, list, o_i32, o_i64, o_u64, o_f32, o_list, o_ranged, o_tokens] = cli;
  static const char* names[] = {"--i32", "--i64", "--u64", "--f32", "--list", "--ranged", "--tokens"};
  std::vector<std::string> argv{"prog"};
  for (size_t k = 0; k < args.size(); ++k) {
    if (structured) {
      if (k >= 7) break;
      argv.push_back(names[k]);
    }
    argv.push_back(args[k]);
  }
  std::vector<const char*> ptrs;
  for (const auto& a : argv) ptrs.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const CLI::ParseError&) {
    return;  // refused: fine
  }
  // Accepted: each value is what its text says, by the strict parsers.
  auto text_of = [](CLI::Option* o) { return o->count() ? o->results().back() : std::string(); };
  if (o_i32->count()) {
    const auto v = tally::parse_integer(text_of(o_i32));
    if (!v || *v != i32) violated("--i32 differs from its text", text_of(o_i32));
  }
  if (o_i64->count()) {
    const auto v = tally::parse_integer(text_of(o_i64));
    if (!v || *v != i64) violated("--i64 differs from its text", text_of(o_i64));
  }
  if (o_u64->count()) {
    const auto v = tally::parse_whole(tally::trim(text_of(o_u64)));
    if (!v || *v != u64) violated("--u64 differs from its text", text_of(o_u64));
  }
  if (o_f32->count()) {
    const auto v = tally::parse_real(text_of(o_f32));
    // CLI11 converts through long double: allow the one float step that double rounding can move.
    const float want = v ? static_cast<float>(*v) : 0;
    if (!v || !std::isfinite(f32) || (f32 != want && std::nextafter(want, f32) != f32))
      violated("--f32 differs from its text", text_of(o_f32));
  }
  if (o_ranged->count() && (ranged < -5 || ranged > (1 << 24))) violated("--ranged outside its range", text_of(o_ranged));
  if (o_tokens->count()) {  // accepted: the count its text says ("8k" is 8192), within its range
    const uint64_t want = tally::parse_token_count(text_of(o_tokens), "--tokens");
    if (static_cast<uint64_t>(tokens) != want || tokens < 1 || tokens > (1 << 24))
      violated("--tokens differs from its text or its range", text_of(o_tokens));
  }
  if (o_list->count()) {
    const auto& items = o_list->results();
    if (items.size() != list.size()) violated("--list item count", text_of(o_list));
    for (size_t k = 0; k < items.size(); ++k) {
      const auto v = tally::parse_integer(items[k]);
      if (!v || *v != list[k]) violated("--list item differs from its text", items[k]);
    }
  }
}

void parse_sizes(const std::string& text) {
  try {
    const uint64_t b = tally::parse_byte_count(text, "--budget");
    if (b == 0) violated("zero byte count accepted", text);
    if (tally::parse_byte_count(fmt::format("{}", b), "--budget") != b) violated("byte count does not read back", text);
  } catch (const tally::Error& e) {
    tally_fuzz::check_message("fuzz_cli_numbers", e);
  }
  try {
    const auto list = tally::parse_token_list(text);
    if (list.empty()) violated("empty token list accepted", text);
    for (uint64_t t : list)
      if (t == 0) violated("zero tokens accepted", text);
  } catch (const tally::Error& e) {
    tally_fuzz::check_message("fuzz_cli_numbers", e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > 4096) return 0;
  const std::vector<std::string> args = fields(data, size);
  parse_cli(args, data[0] % 2 == 0);
  // The first two fields as sizes too (a refusal throws, and throwing is the slow part).
  for (size_t k = 0; k < args.size() && k < 2; ++k) parse_sizes(args[k]);
  return 0;
}
