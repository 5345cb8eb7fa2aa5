// tally cache: what a prefix-cache folder (run/chat/serve --cache-dir) holds,
// and clearing it.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "core/printable.h"
#include "kv/kv_disk.h"
#include "option_checks.h"
#include "output.h"

namespace tally::cli {

namespace {

struct CacheOptions {
  std::string dir;
  bool clear = false;
  bool json = false;
};

void cache(const CacheOptions& o) {
  std::error_code ec;
  if (!std::filesystem::is_directory(o.dir, ec)) fail("cache: {}: not a folder", printable(o.dir));
  const KvDiskUsage u = o.clear ? KvDisk::clear(o.dir) : KvDisk::usage(o.dir);
  if (o.json) {
    print_json({{"dir", o.dir}, {"cleared", o.clear}, {"block_files", u.files}, {"bytes", u.bytes},
                {"temporary_files", u.temporary}});
    return;
  }
  fmt::print("{}: {} {} KV block file{} ({}){}\n", printable(o.dir), o.clear ? "removed" : "holds", u.files,
             u.files == 1 ? "" : "s", format_bytes(u.bytes),
             u.temporary > 0 ? fmt::format(", {} unfinished write{}{}", u.temporary, u.temporary == 1 ? "" : "s",
                                           o.clear ? " removed" : "")
                             : "");
}

}  // namespace

void add_cache(CLI::App& app) {
  auto o = std::make_shared<CacheOptions>();
  auto* cmd = app.add_subcommand("cache", "A prefix-cache folder (--cache-dir of run, chat, serve): its size; --clear empties it");
  cmd->add_option("dir", o->dir, "The folder")->required()->check(nonempty_path());
  cmd->add_flag("--clear", o->clear, "Remove its KV block files (other files are left alone)");
  cmd->add_flag("--json", o->json, "Print {\"dir\", \"cleared\", \"block_files\", \"bytes\", \"temporary_files\"} as JSON");
  cmd->callback([o] { cache(*o); });
}

}  // namespace tally::cli
