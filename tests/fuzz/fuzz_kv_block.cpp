// libFuzzer target for the disk tier's block file reader (kv/kv_disk.h: a
// file in a --cache-dir folder is outside bytes). Each input is put under
// the name of block 0 of a fixed layout and tokens and read twice: as it is,
// and with the right SHA-256 appended, so that mutations of the header, the
// sizes and the tokens reach the checks behind the checksum. Properties: the
// reader never throws; a file it rejects is gone, unless it is of a newer
// format version (then it stays); a file it accepts is exactly the file the
// writer makes for the payload it handed out; the layer-by-layer reader of a
// restore (kv/kv_restore.h) accepts exactly the files get() accepts, and
// reads the same payload.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/sha256.h"
#include "fuzz_checks.h"
#include "kv/kv_disk.h"
#include "kv/kv_restore.h"

namespace {

constexpr const char* kTarget = "fuzz_kv_block";
namespace fs = std::filesystem;

const tally::KvDiskLayout kLayout{7, tally::DType::F16, 4, 2, 1, 16};
const std::vector<int32_t> kTokens{1, 2, 3, 4};

struct Folders {
  fs::path read, write, layers;
  Folders() {
    const fs::path base = fs::temp_directory_path() / ("tally_fuzz_kv_block_" + std::to_string(::getpid()));
    read = base / "read";
    write = base / "write";
    layers = base / "layers";
    fs::create_directories(layers);
    fs::create_directories(read);
    fs::create_directories(write);
  }
};

std::vector<uint8_t> file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Puts the bytes under block 0's name in `dir` and returns its path.
fs::path place(const fs::path& dir, tally::KvDisk& disk, const std::vector<uint8_t>& bytes) {
  const tally::BlockDigest name = tally::KvDisk::chain(disk.root(), kTokens);
  disk.put(name, disk.root(), kTokens, false,
           [&](uint8_t* p) { std::fill(p, p + disk.payload_bytes(false), uint8_t{0}); });
  fs::path path;
  for (const auto& e : fs::directory_iterator(dir)) path = e.path();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// What the layer-by-layer reader says of the bytes (a file without window
// layers' K/V: the only kind a restore reads that way), compared with get().
void check_layers(const Folders& f, const std::vector<uint8_t>& bytes, bool ok, const std::vector<uint8_t>& payload) {
  tally::KvDisk::clear(f.layers.string());
  tally::KvDisk disk({f.layers.string(), 0}, kLayout);
  place(f.layers, disk, bytes);
  std::optional<tally::KvDiskFile> file =
      disk.open(tally::KvDisk::chain(disk.root(), kTokens), disk.root(), kTokens, false);
  if (!file || file->window) return;  // get() said the same: no further read
  const uint64_t bb = kLayout.block_bytes;
  std::vector<uint8_t> kv(2 * bb);  // the one full layer's K and V
  std::vector<tally::KvRestore::Block> blocks;
  blocks.push_back({std::move(*file), {kv.data()}, {kv.data() + bb}});
  tally::KvRestore restore(std::move(blocks), bb);
  const bool passed = restore.finish()[0] != 0;
  if (passed != ok) tally_fuzz::violated(kTarget, "the layer reader and get() disagree on a file", "");
  if (passed && kv != payload) tally_fuzz::violated(kTarget, "the layer reader read another payload", "");
}

void check(const Folders& f, const std::vector<uint8_t>& bytes) {
  try {
    tally::KvDisk::clear(f.read.string());
    tally::KvDisk reader({f.read.string(), 0}, kLayout);
    const tally::BlockDigest name = tally::KvDisk::chain(reader.root(), kTokens);
    // The path the reader looks for: learnt from a write of its own, then replaced.
    const fs::path path = place(f.read, reader, bytes);
    std::vector<uint8_t> payload;
    bool window = false;
    const bool ok = reader.get(name, reader.root(), kTokens, false, [&](const uint8_t* p, bool w) {
      window = w;
      payload.assign(p, p + reader.payload_bytes(w));
    });
    check_layers(f, bytes, ok, payload);
    if (!ok) {
      // Only a file of a newer format (a newer tally's, sharing the folder) stays.
      const bool newer = bytes.size() >= 12 && std::memcmp(bytes.data(), "TALLYKVB", 8) == 0 &&
                         (bytes[8] | bytes[9] << 8 | bytes[10] << 16 | static_cast<uint32_t>(bytes[11]) << 24) > 1;
      if (fs::exists(path) != newer)
        tally_fuzz::violated(kTarget, newer ? "a newer format's file was removed" : "a rejected file was kept",
                             path.string());
      return;
    }
    tally::KvDisk::clear(f.write.string());
    tally::KvDisk writer({f.write.string(), 0}, kLayout);
    writer.put(name, writer.root(), kTokens, window, [&](uint8_t* p) { std::copy(payload.begin(), payload.end(), p); });
    fs::path written;
    for (const auto& e : fs::directory_iterator(f.write)) written = e.path();
    if (file_bytes(written) != bytes) tally_fuzz::violated(kTarget, "an accepted file is not what the writer makes", "");
  } catch (const tally::Error& e) {
    tally_fuzz::violated(kTarget, "the reader threw", e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Folders folders;
  std::vector<uint8_t> bytes(data, data + size);
  check(folders, bytes);
  tally::Sha256 h;
  h.update(data, size);
  const auto sum = h.digest();
  bytes.insert(bytes.end(), sum.begin(), sum.end());
  check(folders, bytes);
  return 0;
}
