// AtomicFile (io/atomic_file.h): only a regular file (or a new one) is
// replaced, a symlink's target gets the bytes and the link stays, a device,
// FIFO or folder is refused untouched, a failed write leaves the old file and
// no temporary behind, and a killed writer's temporary is removed by the
// next write to the same target.
#include "io/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "test_util.h"

namespace tally {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/tally-atomic-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
  int entries() const { return static_cast<int>(std::distance(fs::directory_iterator(path), fs::directory_iterator())); }
};

std::string read_all(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(AtomicFile, WritesANewFileAndReplacesAnOldOne) {
  TempDir d;
  write_file_atomically(d.file("a"), "test file", "first");
  EXPECT_EQ(read_all(d.file("a")), "first");
  ::chmod(d.file("a").c_str(), 0600);
  write_file_atomically(d.file("a"), "test file", "second, longer");
  EXPECT_EQ(read_all(d.file("a")), "second, longer");
  EXPECT_EQ(fs::status(d.file("a")).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write)
      << "the replaced file's permissions are kept";
  EXPECT_EQ(d.entries(), 1) << "no temporary file is left";
}

TEST(AtomicFile, ASymlinkIsFollowedAndStaysALink) {
  TempDir d;
  write_file_atomically(d.file("target"), "test file", "old");
  fs::create_symlink("target", d.file("link"));
  write_file_atomically(d.file("link"), "test file", "new");
  EXPECT_TRUE(fs::is_symlink(d.file("link")));
  EXPECT_EQ(read_all(d.file("target")), "new");
  // A dangling link: the file it names is created, the link stays.
  fs::create_symlink("sub/../later", d.file("dangling"));
  fs::create_directory(d.file("sub"));
  write_file_atomically(d.file("dangling"), "test file", "made");
  EXPECT_TRUE(fs::is_symlink(d.file("dangling")));
  EXPECT_EQ(read_all(d.file("later")), "made");
  // A chain of links: the end of the chain gets the bytes.
  fs::create_symlink("link", d.file("link2"));
  write_file_atomically(d.file("link2"), "test file", "chained");
  EXPECT_EQ(read_all(d.file("target")), "chained");
  EXPECT_TRUE(fs::is_symlink(d.file("link2")) && fs::is_symlink(d.file("link")));
  // A loop.
  fs::create_symlink("loop_b", d.file("loop_a"));
  fs::create_symlink("loop_a", d.file("loop_b"));
  expect_error([&] { write_file_atomically(d.file("loop_a"), "test file", "x"); }, {"loop_a", "symbolic links"});
}

TEST(AtomicFile, DevicesFifosAndFoldersAreRefusedUntouched) {
  TempDir d;
  ASSERT_EQ(::mkfifo(d.file("fifo").c_str(), 0600), 0);
  expect_error([&] { write_file_atomically(d.file("fifo"), "session file", "x"); },
               {"fifo", "it is a FIFO, not a regular file", "cannot write the session file"});
  EXPECT_TRUE(fs::is_fifo(d.file("fifo")));
  for (const char* dev : {"/dev/null", "/dev/full", "/dev/zero"}) {
    expect_error([&] { write_file_atomically(dev, "session file", "x"); }, {dev, "character device"});
    EXPECT_TRUE(fs::is_character_file(dev)) << dev << " must stay a device";
  }
  fs::create_symlink("/dev/null", d.file("to_null"));
  expect_error([&] { write_file_atomically(d.file("to_null"), "plot", "x"); }, {"to_null", "character device"});
  EXPECT_TRUE(fs::is_symlink(d.file("to_null")));
  fs::create_directory(d.file("dir"));
  expect_error([&] { write_file_atomically(d.file("dir"), "plot", "x"); }, {"dir", "it is a directory"});
  expect_error([&] { write_file_atomically("", "session file", "x"); }, {"session file path is empty"});
  expect_error([&] { write_file_atomically(d.file("missing/a"), "plot", "x"); }, {"missing/a", "cannot write the plot there: folder", "No such file"});
  EXPECT_EQ(d.entries(), 3) << "fifo, to_null, dir and nothing else";
}

// A write that fails half-way (here: the file size limit, as a full disk would)
// throws, keeps the old file whole and removes the temporary file.
TEST(AtomicFile, AFailedWriteKeepsTheOldFileAndLeavesNoTemporary) {
  TempDir d;
  write_file_atomically(d.file("a"), "test file", "the old content");
  std::fflush(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit lim{4096, 4096};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    try {
      write_file_atomically(d.file("a"), "test file", std::string(10000, 'x'));
    } catch (const Error& e) {
      ::_exit(std::string(e.what()).find("cannot write the test file") != std::string::npos ? 42 : 1);
    }
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42) << "the failed write was not reported";
  EXPECT_EQ(read_all(d.file("a")), "the old content");
  EXPECT_EQ(d.entries(), 1);
}

// kill -9 while writing leaves ".a.tmp-PID-XXXXXX"; the next write to "a" removes it.
TEST(AtomicFile, AKilledWritersTemporaryIsRemovedByTheNextWrite) {
  TempDir d;
  std::fflush(nullptr);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    AtomicFile f(d.file("a"), "test file");
    f.write("partial", 7);
    ::raise(SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  ASSERT_EQ(d.entries(), 1);
  const std::string left = fs::directory_iterator(d.path)->path().filename().string();
  EXPECT_EQ(left.rfind(".a.tmp-" + std::to_string(child) + "-", 0), 0u) << left;
  EXPECT_FALSE(fs::exists(d.file("a")));
  // Another file's temporaries and a live writer's are not touched.
  AtomicFile open_one(d.file("a"), "test file");
  write_file_atomically(d.file("b"), "test file", "b");
  EXPECT_EQ(d.entries(), 2) << "a's open temporary and b";
  write_file_atomically(d.file("a"), "test file", "whole");
  EXPECT_EQ(read_all(d.file("a")), "whole");
}

}  // namespace
}  // namespace tally
