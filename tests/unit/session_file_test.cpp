// Saved sessions (io/session_file.h, Session::save/load) on the tiny synthetic
// decoder: save, load, continue equals an uninterrupted run bit for bit; a
// flipped byte anywhere, a truncation anywhere, a newer format, another
// model, another cache type, a context too small are all refused with the
// reason; a process killed during a save leaves the previous file intact.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/session_file.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "session_helpers.h"
#include "test_util.h"
#include "tiny_model.h"

namespace tally {
namespace {

using test::expect_error;

using TempDir = test::TempDir;

std::vector<uint8_t> read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

TEST(SessionFile, SaveLoadContinueEqualsAnUninterruptedRun) {
  const auto tm = test::make_tiny_model();
  TempDir dir;
  for (DType cache : {DType::F16, DType::F32}) {
    Session whole(*tm->model, test::small_block_session(cache, 128));
    const auto all = generate(whole, test::token_pattern(11), test::greedy_options(20)).tokens;

    Session first(*tm->model, test::small_block_session(cache, 128));
    const auto head = generate(first, test::token_pattern(11), test::greedy_options(8)).tokens;
    first.append(std::span<const int32_t>(&head.back(), 1));  // the last chosen token into the cache, as run does
    first.save(dir / "s.tks", "meta text");

    Session second(*tm->model, test::small_block_session(cache, 128));
    EXPECT_EQ(second.load(dir / "s.tks"), "meta text");
    EXPECT_EQ(second.length(), 19);
    const int32_t last = second.tokens().back();
    second.truncate(18);
    const auto tail = generate(second, std::vector<int32_t>{last}, test::greedy_options(12)).tokens;
    std::vector<int32_t> joined = head;
    joined.insert(joined.end(), tail.begin(), tail.end());
    EXPECT_EQ(joined, all) << dtype_name(cache);
  }
}

TEST(SessionFile, EveryFlippedByteAndEveryTruncationIsRefused) {
  const auto tm = test::make_tiny_model();
  TempDir dir;
  Session s(*tm->model, test::small_block_session(DType::F16, 128));
  s.append(test::token_pattern(9));
  s.save(dir / "s.tks", "{}");
  const auto good = read_all(dir / "s.tks");
  ASSERT_NO_THROW(parse_session_file(good.data(), good.size(), "s.tks"));
  for (size_t i = 0; i < good.size(); ++i) {
    auto bad = good;
    bad[i] ^= 0x10;
    EXPECT_THROW(parse_session_file(bad.data(), bad.size(), "s.tks"), Error) << "flipped byte " << i << " was accepted";
  }
  for (size_t n = 0; n < good.size(); n += n < 128 ? 1 : 97)
    EXPECT_THROW(parse_session_file(good.data(), n, "s.tks"), Error) << "truncated to " << n;
  auto longer = good;
  longer.push_back(0);
  expect_error([&] { parse_session_file(longer.data(), longer.size(), "s.tks"); }, {"s.tks", "truncated or altered"});
  auto newer = good;
  newer[8] = 2;  // the version field
  expect_error([&] { parse_session_file(newer.data(), newer.size(), "s.tks"); }, {"format 2", "newer"});
  auto flipped = good;
  flipped[good.size() / 2] ^= 1;
  expect_error([&] { parse_session_file(flipped.data(), flipped.size(), "s.tks"); }, {"checksum"});
}

TEST(SessionFile, AnotherModelAnotherCacheTypeOrASmallerContextIsRefused) {
  const auto tm = test::make_tiny_model();
  test::TinySpec other_spec;
  other_spec.seed = 2;  // same layout, other weights
  const auto other = test::make_tiny_model(other_spec);
  EXPECT_NE(tm->model->fingerprint(), other->model->fingerprint());
  TempDir dir;
  Session s(*tm->model, test::small_block_session(DType::F16, 128));
  s.append(test::token_pattern(20));
  s.save(dir / "s.tks");
  Session o(*other->model, test::small_block_session(DType::F16, 128));
  expect_error([&] { o.load(dir / "s.tks"); }, {"s.tks", "another model"});
  Session f32(*tm->model, test::small_block_session(DType::F32, 128));
  expect_error([&] { f32.load(dir / "s.tks"); }, {"holds a F16 cache", "load it into a f16 cache"});
  Session small(*tm->model, test::small_block_session(DType::F16, 16));
  expect_error([&] { small.load(dir / "s.tks"); }, {"20 positions", "context of 16"});
  expect_error([&] { small.load(dir / "missing.tks"); }, {"missing.tks", "not a session file"});
  // A refused load leaves the session as it was.
  small.append(test::token_pattern(3));
  EXPECT_THROW(small.load(dir / "s.tks"), Error);
  EXPECT_EQ(small.tokens(), test::token_pattern(3));
}

// A save killed after its first layer: the file under the name is the previous one, whole.
TEST(SessionFile, AKilledSaveLeavesThePreviousFileIntact) {
  const auto tm = test::make_tiny_model();
  TempDir dir;
  Session s(*tm->model, test::small_block_session(DType::F16, 128));
  s.append(test::token_pattern(6));
  s.save(dir / "s.tks", "before");
  const auto before = read_all(dir / "s.tks");
  s.append(test::token_pattern(30));
  std::fflush(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    s.save(dir / "s.tks", "after", [](uint32_t) { ::raise(SIGKILL); });
    ::_exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the save was not interrupted";
  EXPECT_EQ(read_all(dir / "s.tks"), before);
  Session again(*tm->model, test::small_block_session(DType::F16, 128));
  EXPECT_EQ(again.load(dir / "s.tks"), "before");
  EXPECT_EQ(again.tokens(), test::token_pattern(6));
}

}  // namespace
}  // namespace tally
