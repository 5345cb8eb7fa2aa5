// The prefix cache's disk tier (kv/kv_disk.h): a block file reads back as
// written; a flipped byte, a truncated file, one of another model or cache
// type, garbage under a block's name: each is a miss, removed and counted,
// never loaded; the budget holds, least recently used first; a folder that
// is a file is refused. Through the engine: logits after a restore from disk
// equal a cold run bit for bit (f16, q8_0, and Gemma 3's sliding-window
// layers, whose slots behind the window are not restored); a block whose
// checksum fails only after the step read it (the payloads are read while the
// step runs) is evaluated again, so the logits are still the cold run's; a
// slid stream's blocks are never written.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kv/kv_cache.h"
#include "kv/kv_disk.h"
#include "runtime/engine.h"
#include "runtime/generator.h"
#include "runtime/session.h"
#include "session_helpers.h"
#include "test_model_path.h"
#include "test_util.h"
#include "tiny_model.h"

namespace tally {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char t[] = "/tmp/tally-kvdisk-XXXXXX";
    path = ::mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str() const { return path.string(); }
};

KvDiskLayout layout(uint64_t fingerprint = 42) {
  return KvDiskLayout{fingerprint, DType::F16, 4, 2, 0, 64};
}

std::vector<uint8_t> payload(const KvDisk& d, uint8_t seed) {
  std::vector<uint8_t> p(d.payload_bytes(false));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(seed + 7 * i);
  return p;
}

std::vector<fs::path> block_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".kvb") out.push_back(e.path());
  return out;
}

// Writes block 0 of tokens {1,2,3,4}; returns its digest.
BlockDigest put_first(KvDisk& d, uint8_t seed, std::vector<int32_t> tokens = {1, 2, 3, 4}) {
  const BlockDigest name = KvDisk::chain(d.root(), tokens);
  const auto p = payload(d, seed);
  d.put(name, d.root(), tokens, false, [&](uint8_t* out) { std::copy(p.begin(), p.end(), out); });
  return name;
}

bool get_first(KvDisk& d, const BlockDigest& name, std::vector<uint8_t>* out = nullptr,
               std::vector<int32_t> tokens = {1, 2, 3, 4}) {
  return d.get(name, d.root(), tokens, false, [&](const uint8_t* p, bool) {
    if (out) out->assign(p, p + d.payload_bytes(false));
  });
}

TEST(KvDisk, ABlockReadsBackAsWrittenInANewProcess) {
  TempDir dir;
  BlockDigest name;
  {
    KvDisk d({dir.str(), 0}, layout());
    name = put_first(d, 3);
    EXPECT_TRUE(d.has(name));
    EXPECT_EQ(d.stats().written, 1u);
  }
  KvDisk again({dir.str(), 0}, layout());  // a restart: found by its scan and by name
  EXPECT_EQ(again.stats().files, 1);
  std::vector<uint8_t> got;
  ASSERT_TRUE(get_first(again, name, &got));
  EXPECT_EQ(got, payload(again, 3));
  EXPECT_EQ(again.stats().hits, 1u);
  // Other tokens under the same parent name another block: not there.
  EXPECT_FALSE(again.has(KvDisk::chain(again.root(), std::vector<int32_t>{1, 2, 3, 5})));
}

TEST(KvDisk, ABadFileIsAMissRemovedAndCounted) {
  TempDir dir;
  // Each way a file can go bad, applied to a freshly written block.
  const std::vector<std::pair<const char*, std::function<void(const fs::path&)>>> spoil = {
      {"a flipped payload byte",
       [](const fs::path& f) {
         std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
         s.seekp(200);
         char c;
         s.read(&c, 1);
         s.seekp(200);
         c ^= 1;
         s.write(&c, 1);
       }},
      {"a truncated file", [](const fs::path& f) { fs::resize_file(f, fs::file_size(f) - 100); }},
      {"garbage", [](const fs::path& f) { std::ofstream(f, std::ios::binary | std::ios::trunc) << "not a block"; }},
      {"an empty file", [](const fs::path& f) { std::ofstream(f, std::ios::binary | std::ios::trunc); }},
  };
  uint64_t corrupt = 0;
  for (const auto& [what, bad] : spoil) {
    KvDisk d({dir.str(), 0}, layout());
    const BlockDigest name = put_first(d, 5);
    const auto files = block_files(dir.path);
    ASSERT_EQ(files.size(), 1u) << what;
    bad(files[0]);
    EXPECT_FALSE(get_first(d, name)) << what;
    EXPECT_EQ(d.stats().corrupt, 1u) << what;
    EXPECT_TRUE(block_files(dir.path).empty()) << what << ": the bad file must be removed";
    ++corrupt;
    put_first(d, 5);  // the next write works
    EXPECT_TRUE(get_first(d, name)) << what;
    fs::remove(block_files(dir.path)[0]);
  }
  EXPECT_EQ(corrupt, spoil.size());
}

TEST(KvDisk, AFileOfANewerFormatIsAMissLeftInPlace) {
  TempDir dir;
  KvDisk d({dir.str(), 0}, layout());
  const BlockDigest name = put_first(d, 1);
  const fs::path f = block_files(dir.path)[0];
  {
    std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(8);
    const char version2[4] = {2, 0, 0, 0};
    s.write(version2, 4);
  }
  EXPECT_FALSE(get_first(d, name));
  EXPECT_TRUE(fs::exists(f));
  EXPECT_EQ(d.stats().newer, 1u);
  EXPECT_EQ(d.stats().corrupt, 0u);
  put_first(d, 1);  // never written over
  EXPECT_EQ(d.stats().written, 1u);
}

TEST(KvDisk, AFileOfAnotherModelOrCacheTypeIsNeverLoaded) {
  KvDiskLayout other_model = layout(43), q8 = layout(), other_shape = layout();
  q8.type = DType::Q8_0;
  other_shape.n_layer = 3;
  for (const KvDiskLayout& foreign : {other_model, q8, other_shape}) {
    TempDir mine_dir, their_dir;
    KvDisk mine({mine_dir.str(), 0}, layout());
    KvDisk theirs({their_dir.str(), 0}, foreign);
    // The same tokens name another block: theirs is a plain miss here...
    EXPECT_NE(mine.root(), theirs.root());
    const BlockDigest name = put_first(mine, 1);
    EXPECT_NE(put_first(theirs, 9), name);
    // ...and their file put under this cache's name fails its checks.
    const fs::path own = block_files(mine_dir.path)[0];
    fs::copy_file(block_files(their_dir.path)[0], own, fs::copy_options::overwrite_existing);
    EXPECT_FALSE(get_first(mine, name));
    EXPECT_EQ(mine.stats().corrupt, 1u);
    EXPECT_FALSE(fs::exists(own));
  }
}

TEST(KvDisk, TheBudgetHoldsLeastRecentlyUsedFirst) {
  TempDir dir;
  uint64_t file_bytes = 0;
  {
    KvDisk probe({dir.str() + "/probe", 0}, layout());
    put_first(probe, 1);
    file_bytes = probe.stats().bytes;
  }
  KvDisk d({dir.str(), file_bytes * 5 / 2}, layout());  // room for two files
  std::vector<BlockDigest> names;
  for (int i = 0; i < 4; ++i) {
    names.push_back(put_first(d, static_cast<uint8_t>(i), {i, i, i, i}));
    EXPECT_LE(d.stats().bytes, file_bytes * 5 / 2);
    if (i == 2) {  // a hit on block 1 makes block 2 the least recently used
      ASSERT_TRUE(get_first(d, names[1], nullptr, {1, 1, 1, 1}));
    }
  }
  EXPECT_EQ(d.stats().files, 2);
  EXPECT_EQ(d.stats().evictions, 2u);
  EXPECT_TRUE(d.has(names[1]));
  EXPECT_TRUE(d.has(names[3]));
  EXPECT_FALSE(d.has(names[0]));
  EXPECT_FALSE(d.has(names[2]));
  // A block larger than the whole budget is not written.
  KvDisk tiny({dir.str() + "/tiny", 100}, layout());
  put_first(tiny, 1);
  EXPECT_EQ(tiny.stats().files, 0);
}

// The file format as documented in kv_disk.h, written by another
// implementation (scripts/fixtures/make_fuzz_seeds.py, in Python): the
// reader accepts it, and the writer makes the same bytes from its payload.
TEST(KvDisk, ReadsAndWritesTheDocumentedFormat) {
  const KvDiskLayout l{7, DType::F16, 4, 2, 1, 16};
  const std::vector<int32_t> tokens{1, 2, 3, 4};
  for (const char* seed : {"whole", "whole_window"}) {
    std::ifstream in(std::string(TALLY_SOURCE_DIR) + "/tests/fuzz/corpus/kv_block/" + seed, std::ios::binary);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    ASSERT_FALSE(bytes.empty()) << seed;
    TempDir dir;
    KvDisk d({dir.str() + "/read", 0}, l);
    const BlockDigest name = KvDisk::chain(d.root(), tokens);
    d.put(name, d.root(), tokens, false, [&](uint8_t* p) { std::fill(p, p + d.payload_bytes(false), uint8_t{0}); });
    const fs::path path = block_files(dir.path / "read")[0];
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::vector<uint8_t> payload;
    bool window = false;
    ASSERT_TRUE(d.get(name, d.root(), tokens, false, [&](const uint8_t* p, bool w) {
      window = w;
      payload.assign(p, p + d.payload_bytes(w));
    })) << seed;
    EXPECT_EQ(window, std::string(seed) == "whole_window");
    KvDisk w({dir.str() + "/write", 0}, l);
    w.put(name, w.root(), tokens, window, [&](uint8_t* p) { std::copy(payload.begin(), payload.end(), p); });
    std::ifstream again(block_files(dir.path / "write")[0], std::ios::binary);
    EXPECT_EQ(std::vector<char>(std::istreambuf_iterator<char>(again), std::istreambuf_iterator<char>()), bytes) << seed;
  }
}

// Two processes on one folder (two KvDisk objects stand for them): a block
// one writes after the other started is found by name; one the other
// removed is a plain miss, not a corrupt file.
TEST(KvDisk, TwoWritersShareAFolder) {
  TempDir dir;
  KvDisk a({dir.str(), 0}, layout()), b({dir.str(), 0}, layout());
  const BlockDigest name = put_first(a, 4);
  std::vector<uint8_t> got;
  ASSERT_TRUE(get_first(b, name, &got));
  EXPECT_EQ(got, payload(b, 4));
  put_first(b, 4);  // already there: not written twice
  EXPECT_EQ(b.stats().written, 0u);
  EXPECT_EQ(KvDisk::clear(dir.str()).files, 1);
  EXPECT_FALSE(get_first(a, name));
  EXPECT_EQ(a.stats().corrupt, 0u);
  EXPECT_EQ(a.stats().files, 0) << "a file gone from the folder leaves the budget's count";
  KvDiskUsage cleared = KvDisk::clear(dir.str());
  EXPECT_EQ(cleared.files, 0);
  put_first(b, 4);  // b still counts the file the other removed: it writes it again
  EXPECT_EQ(b.stats().written, 1u);
  EXPECT_TRUE(get_first(a, name));
}

// A disk that fills up (the file size limit stands in for it: writes past
// it fail with EFBIG as they would with ENOSPC): the write is counted, no
// file is left, and what was written before still loads.
TEST(KvDisk, AFullDiskCountsTheWriteAndLeavesNoFile) {
  TempDir dir;
  KvDisk d({dir.str(), 0}, layout());
  const BlockDigest kept = put_first(d, 1);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 100;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  put_first(d, 2, {9, 9, 9, 9});
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  EXPECT_EQ(d.stats().write_errors, 1u);
  EXPECT_EQ(d.stats().written, 1u);
  EXPECT_EQ(KvDisk::usage(dir.str()).files, 1);
  EXPECT_EQ(KvDisk::usage(dir.str()).temporary, 0);
  EXPECT_TRUE(get_first(d, kept));
}

TEST(KvDisk, FoldersUsageClearAndRefusals) {
  TempDir dir;
  {
    KvDisk d({dir.str(), 0}, layout());
    put_first(d, 1);
    put_first(d, 2, {5, 6, 7, 8});
  }
  // A write a killed process left behind (its pid cannot be alive), and a file that is not the cache's.
  std::ofstream(dir.path / (".aa.kvb.tmp-" + std::to_string(1 << 22) + "-abcdef")) << "x";
  std::ofstream(dir.path / "notes.txt") << "mine";
  KvDiskUsage u = KvDisk::usage(dir.str());
  EXPECT_EQ(u.files, 2);
  EXPECT_EQ(u.temporary, 1);
  { KvDisk d({dir.str(), 0}, layout()); }  // its start-up sweep removes the dead writer's file
  EXPECT_EQ(KvDisk::usage(dir.str()).temporary, 0);
  u = KvDisk::clear(dir.str());
  EXPECT_EQ(u.files, 2);
  EXPECT_EQ(KvDisk::usage(dir.str()).files, 0);
  EXPECT_TRUE(fs::exists(dir.path / "notes.txt"));

  const std::string file = (dir.path / "notes.txt").string();
  test::expect_error([&] { KvDisk d({file, 0}, layout()); }, {"notes.txt", "not a folder"});
  if (::geteuid() != 0) {  // root writes anywhere
    fs::create_directory(dir.path / "ro");
    ::chmod((dir.path / "ro").c_str(), 0555);
    test::expect_error([&] { KvDisk d({(dir.path / "ro").string(), 0}, layout()); }, {"not writable"});
  }
}

// --- Through the engine ---

EngineOptions engine_opts(DType cache, const std::string& dir) {
  EngineOptions o;
  o.n_ctx = 128;
  o.block_size = 8;
  o.step_tokens = 64;
  o.max_sequences = 4;
  o.n_threads = 2;
  o.cache_type = cache;
  o.kv_budget = 64u << 20;
  o.disk.dir = dir;
  return o;
}

std::vector<float> logits_of(Engine& e, std::span<const int32_t> prompt, int64_t* disk_tokens = nullptr) {
  const Engine::Admission a = e.admit(prompt);
  EXPECT_TRUE(a.id.has_value()) << a.refusal;
  if (disk_tokens) *disk_tokens = a.disk_tokens;
  while (!e.ready(*a.id)) e.step();
  const auto l = e.logits(*a.id);
  std::vector<float> out(l.begin(), l.end());
  e.release(*a.id);
  return out;
}

TEST(KvDiskEngine, LogitsAfterARestoreEqualAColdRunBitForBit) {
  test::TinySpec spec;  // heads of 32: one q8_0 block per head vector
  spec.head_dim = 32;
  spec.n_embd = 128;
  const auto tm = test::make_tiny_model(spec);
  const auto first = test::token_pattern(45);
  std::vector<int32_t> longer = first;
  for (int i = 0; i < 12; ++i) longer.push_back((5 * i + 2) % 50);
  for (DType cache : {DType::F16, DType::Q8_0}) {
    TempDir dir;
    {
      Engine writer(*tm->model, engine_opts(cache, dir.str()));
      logits_of(writer, first);
      EXPECT_EQ(writer.cache_stats().disk.written, 5u) << "44 keyed positions: five full blocks of 8";
    }
    Engine cold(*tm->model, engine_opts(cache, ""));
    const std::vector<float> expect = logits_of(cold, longer);
    Engine restored(*tm->model, engine_opts(cache, dir.str()));
    int64_t from_disk = 0;
    EXPECT_EQ(logits_of(restored, longer, &from_disk), expect) << dtype_name(cache);
    EXPECT_EQ(from_disk, 40) << dtype_name(cache);
    EXPECT_EQ(restored.cache_stats().disk.hits, 5u);
    EXPECT_EQ(restored.cache_stats().disk_hit_tokens, 40u);
    // The restored blocks are in RAM now: a third prompt takes them from there.
    int64_t again = -1;
    logits_of(restored, longer, &again);
    EXPECT_EQ(again, 0);
    EXPECT_EQ(restored.cache_stats().disk.hits, 5u);
  }
}

TEST(KvDiskEngine, ACorruptBlockEndsTheRestoreThereAndTheLogitsStayExact) {
  const auto tm = test::make_tiny_model();
  const auto prompt = test::token_pattern(45);
  TempDir dir;
  {
    Engine writer(*tm->model, engine_opts(DType::F32, dir.str()));
    logits_of(writer, prompt);
  }
  // Spoil every file but one: the restore keeps what checks out, in order.
  Engine cold(*tm->model, engine_opts(DType::F32, ""));
  const auto expect = logits_of(cold, prompt);
  auto files = block_files(dir.path);
  ASSERT_EQ(files.size(), 5u);
  for (const auto& f : files) fs::resize_file(f, fs::file_size(f) - 1);
  Engine restored(*tm->model, engine_opts(DType::F32, dir.str()));
  int64_t from_disk = -1;
  EXPECT_EQ(logits_of(restored, prompt, &from_disk), expect);
  EXPECT_EQ(from_disk, 0);
  EXPECT_EQ(restored.cache_stats().disk.corrupt, 1u) << "the first bad block ends the lookup";
}

// The file of the prefix's block `index` (its parent chain followed from the root).
fs::path chain_file(const fs::path& dir, size_t index) {
  std::map<std::string, std::pair<std::string, fs::path>> by_parent;  // parent digest -> (digest, file)
  std::string root;
  for (const auto& f : block_files(dir)) {
    std::ifstream in(f, std::ios::binary);
    std::string head(112, '\0');
    in.read(head.data(), 112);
    root = head.substr(16, 32);
    by_parent[head.substr(80, 32)] = {head.substr(48, 32), f};
  }
  std::string at = root;
  for (size_t i = 0;; ++i) {
    const auto& [digest, file] = by_parent.at(at);
    if (i == index) return file;
    at = digest;
  }
}

void flip_byte(const fs::path& f, uint64_t offset) {
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  io.read(&c, 1);
  c = static_cast<char>(c ^ 0x40);
  io.seekp(static_cast<std::streamoff>(offset));
  io.write(&c, 1);
}

// The payloads of a restore are read while the step runs and checked after
// it: a block whose checksum fails then is removed and counted, and the step
// evaluates its positions and the later ones again before any logits are
// used, so the output is the cold run's. Another prompt in the same step
// keeps its own logits.
TEST(KvDiskEngine, ABlockFailingItsChecksumAfterTheStepReadItIsEvaluatedAgain) {
  const auto tm = test::make_tiny_model();
  const auto prompt = test::token_pattern(45);
  std::vector<int32_t> longer = prompt;
  for (int i = 0; i < 12; ++i) longer.push_back((5 * i + 2) % 50);
  std::vector<int32_t> other(20);
  for (size_t i = 0; i < other.size(); ++i) other[i] = static_cast<int32_t>((7 * i + 3) % 50);
  for (const size_t spoiled : {size_t{0}, size_t{2}, size_t{4}}) {
    TempDir dir;
    {
      Engine writer(*tm->model, engine_opts(DType::F32, dir.str()));
      logits_of(writer, prompt);
    }
    Engine cold(*tm->model, engine_opts(DType::F32, ""));
    const auto expect = logits_of(cold, longer);
    const auto expect_other = logits_of(cold, other);
    const fs::path bad = chain_file(dir.path, spoiled);
    flip_byte(bad, fs::file_size(bad) - 40);  // in the last layer's V: only the checksum sees it

    Engine restored(*tm->model, engine_opts(DType::F32, dir.str()));
    const Engine::Admission a = restored.admit(longer);
    const Engine::Admission b = restored.admit(other);
    ASSERT_TRUE(a.id && b.id);
    EXPECT_EQ(a.disk_tokens, 40) << "the identity checks pass: the restore takes all five blocks";
    const uint64_t steps = restored.counters().steps;
    while (!restored.ready(*a.id) || !restored.ready(*b.id)) restored.step();
    EXPECT_EQ(restored.counters().steps, steps + 1) << "both prompts in one step";
    const auto got = restored.logits(*a.id), got_other = restored.logits(*b.id);
    EXPECT_EQ(std::vector<float>(got.begin(), got.end()), expect) << "block " << spoiled;
    EXPECT_EQ(std::vector<float>(got_other.begin(), got_other.end()), expect_other) << "block " << spoiled;
    const KvCacheStats st = restored.cache_stats();
    EXPECT_EQ(st.disk.corrupt, 1u);
    EXPECT_EQ(st.disk.hits, 4u);
    // The spoiled block again once evaluated, the tail's two full blocks and the other prompt's two.
    EXPECT_EQ(st.disk.written, 5u);
    restored.release(*a.id);
    restored.release(*b.id);

    // Nothing of the bad file is left: a new process restores every block and gets the cold logits.
    Engine again(*tm->model, engine_opts(DType::F32, dir.str()));
    int64_t from_disk = 0;
    EXPECT_EQ(logits_of(again, longer, &from_disk), expect);
    EXPECT_EQ(from_disk, 56);
    EXPECT_EQ(again.cache_stats().disk.hits, 7u);
    EXPECT_EQ(again.cache_stats().disk.corrupt, 0u);
  }
}

TEST(KvDiskEngine, ASessionsFirstPromptTakesItsPrefixFromDisk) {
  const auto tm = test::make_tiny_model();
  TempDir dir;
  SessionOptions so = test::small_block_session(DType::F32, 128);
  so.disk.dir = dir.str();
  const auto prompt = test::token_pattern(30);
  std::vector<int32_t> expect;
  {
    Session s(*tm->model, so);
    const GenerateResult r = generate(s, prompt, test::greedy_options(10));
    EXPECT_EQ(r.cached_tokens, 0);
    expect = r.tokens;
  }
  Session s(*tm->model, so);
  const GenerateResult r = generate(s, prompt, test::greedy_options(10));
  EXPECT_EQ(r.cached_tokens, 24);
  EXPECT_EQ(r.disk_tokens, 24);
  EXPECT_EQ(r.tokens, expect);
}

TEST(KvDiskEngine, ASlidStreamsBlocksAreNotWritten) {
  const auto tm = test::make_tiny_model();
  TempDir dir;
  SessionOptions so = test::small_block_session(DType::F32, 40);
  so.disk.dir = dir.str();
  Session s(*tm->model, so);
  s.append(test::token_pattern(40));
  const uint64_t before = s.cache().stats().disk.written;
  EXPECT_EQ(before, 5u);
  EXPECT_EQ(s.slide(8, 4), 8);
  s.append(test::token_pattern(8));  // fills the block the slide left partial, and one more
  EXPECT_EQ(s.cache().stats().disk.written, before) << "moved positions hold K/V no cold run of their tokens makes";
}

// Gemma 3 270M: five of six layers see a window of 512. A 700-token prompt
// restored from disk gives the logits of a cold run, with window slots only
// for the blocks of the restored prefix's window range.
TEST(KvDiskEngine, GemmaWindowLayersRestoreOnlyTheWindow) {
  const std::string path = tally_test::catalog_model_path("gemma3:270m");
  if (path.empty()) {
    if (tally_test::model_required()) FAIL() << "gemma3:270m is not installed";
    GTEST_SKIP() << "gemma3:270m is not installed (tally pull gemma3:270m)";
  }
  const auto model = Model::load(path);
  std::vector<int32_t> ids(700);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(1000 + (37 * i * i + 11 * i) % 5000);
  TempDir dir;
  EngineOptions o;
  o.n_ctx = 1024;
  o.n_threads = 2;
  o.max_sequences = 2;
  o.disk.dir = dir.str();
  {
    Engine writer(*model, o);
    logits_of(writer, std::span<const int32_t>(ids).first(600));
  }
  EngineOptions cold_o = o;
  cold_o.disk.dir.clear();
  Engine cold(*model, cold_o);
  const auto expect = logits_of(cold, ids);
  Engine restored(*model, o);
  const Engine::Admission a = restored.admit(ids);
  ASSERT_TRUE(a.id.has_value()) << a.refusal;
  EXPECT_EQ(a.disk_tokens, 576);  // 18 blocks of 32 of the 599 keyed positions
  // Slots for the window range of 576 positions only: blocks 2..17 (positions 65..575 seen from 576).
  EXPECT_EQ(restored.cache_stats().window_slots_used, 16);
  EXPECT_FALSE(restored.cache().holds(0, restored.kv(*a.id), 0));
  EXPECT_TRUE(restored.cache().holds(5, restored.kv(*a.id), 0));  // a global layer holds every position
  while (!restored.ready(*a.id)) restored.step();
  const auto got = restored.logits(*a.id);
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), expect);
}

}  // namespace
}  // namespace tally
