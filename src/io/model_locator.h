#pragma once
// Where tally keeps its files ($TALLY_HOME, default ~/.cache/tally; models in
// $TALLY_HOME/models), and what `-m` names: the one place a model argument
// becomes a path.
//
// -m X is, in this order: a path that exists (a file, a FIFO, an HF folder);
// a catalog name or alias (io/model_catalog.h), which must be installed; a
// file name under $TALLY_HOME/models (with or without ".gguf"). A path that
// also reads as a name wins, and the note says so. An X with a '/' or ending
// in ".gguf" that exists nowhere stays a path, so that opening it reports the
// missing file; anything else is an unknown name.
#include <string>
#include <vector>

#include "io/model_catalog.h"

namespace tally {

std::string tally_home();
std::string models_dir();
// $TALLY_HOME/models/<m.file>, installed or not.
std::string installed_path(const CatalogModel& m);
// The catalog default's installed path (installed or not).
std::string default_model_path();

struct ModelLocation {
  std::string path;
  std::string note;                       // non-empty: a line for stderr (a path chosen over a name)
  const CatalogModel* catalog = nullptr;  // the catalog model when -m named one (or none given)
};

// Throws tally::Error: the default or a named catalog model not installed (how to
// pull it), or an unknown name (what is installed, and the catalog).
ModelLocation locate_model(const std::string& given);

// What is installed: catalog names of installed catalog models, then the file
// names of other files in models_dir(), sorted.
std::vector<std::string> installed_model_names();

}  // namespace tally
